"""`python -m memlens.server`: the language server over stdio (the editor starts it).

    python -m memlens.server            # stdio
    python -m memlens.server --tcp 2087 # for debugging a client by hand
"""

from __future__ import annotations

import argparse
import atexit
import logging
import sys

from .guard import forbid_torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memlens.server",
                                description="Torch Memory Lens language server")
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    p.add_argument("--tcp", type=int, metavar="PORT", help="listen on 127.0.0.1:PORT instead")
    p.add_argument("--log-level", default="WARNING", help="pygls/server logging on stderr")
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="memlens-server %(levelname)s %(name)s: %(message)s")
    forbid_torch()
    from .handlers import create_server

    server = create_server()
    atexit.register(server.runner.running.stop_all, "cancelled")
    if args.tcp:
        server.start_tcp("127.0.0.1", args.tcp)
    else:
        server.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
