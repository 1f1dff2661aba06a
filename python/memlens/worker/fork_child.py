"""Inside a child forked by the warm worker (cli/fork_server.py): what the child must know of
itself. A trace the warm process cannot serve (its fake-CUDA shim is process-global, loaded
before torch: a CPU target would see a CUDA device) replaces the child with a cold worker by
exec: same pid, pipes, session, subreaper and limits, so its parent sees one worker either way.
"""

from __future__ import annotations

import os
import sys

forked = False  # set by the fork server in each child, never in a cold worker


def run_cold_instead(reason: str) -> None:
    """In a forked child: become `python -m memlens <the same arguments>` in a fresh
    interpreter (never returns). In a cold worker: nothing."""
    if not forked:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ["MEMLENS_WARM_FALLBACK"] = reason  # for the tests: why the warm path was left
    os.execv(sys.executable, [sys.executable, "-m", "memlens", *sys.argv[1:]])
