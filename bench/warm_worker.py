"""Trace Memory → first annotation, with the language server's warm worker and without it, in
one run (a ratio: absolute times on a shared machine are noise).

    .venv/bin/python bench/warm_worker.py                 # examples/gpt, 3 rounds
    .venv/bin/python bench/warm_worker.py --rounds 1 --settle 20

Each round starts the language server twice over stdio on examples/gpt — `MEMLENS_WARM_WORKER=0`
(every trace a fresh `python -m memlens`) and the default (forked from the warm worker,
worker/warm.py) — lets it settle as an editor left open would (`--settle` seconds), then asks
`memlens.trace` for `train.py` twice and times each from the request to the first
`memlens/annotations` notification. Best of the rounds; writes bench/results/warm_worker.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import PYTHONPATH, REPO, RESULTS, Client  # noqa: E402

EXAMPLE = REPO / "examples" / "gpt"
snapshots_seen: set[str] = set()  # a trace's annotations name a snapshot not seen before


def first_annotation(client: Client, target: str, timeout: float = 600) -> float:
    """Seconds from asking for the trace to the first annotations it brings."""
    client.next_id += 1
    start = time.perf_counter()
    seen = set(snapshots_seen)
    client._send({"jsonrpc": "2.0", "id": client.next_id, "method": "workspace/executeCommand",
                  "params": {"command": "memlens.trace", "arguments": [{"targetId": target}]}})
    while time.perf_counter() - start < timeout:
        msg = client._read()
        params = msg.get("params") if msg.get("method") == "memlens/annotations" else None
        snapshot = (params or {}).get("snapshot") or {}
        if params and params.get("annotations") and snapshot.get("path") not in seen:
            elapsed = time.perf_counter() - start
            snapshots_seen.add(snapshot["path"])
            _drain(client, client.next_id)
            return elapsed
        if "method" in msg and "id" in msg:
            client._send({"jsonrpc": "2.0", "id": msg["id"], "result": [None] if
                          msg["method"] == "workspace/configuration" else None})
        if msg.get("id") == client.next_id and "method" not in msg:
            raise RuntimeError(f"the trace ended without annotations: {msg}")
    raise TimeoutError("no annotations")


def _drain(client: Client, request_id: int) -> None:
    """Read up to the trace's own reply, so that the next trace starts from a quiet server."""
    while True:
        msg = client._read()
        if msg.get("id") == request_id and "method" not in msg:
            return
        if "method" in msg and "id" in msg:
            client._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})


def one_server(warm: bool, settle: float) -> list[float]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "MEMLENS_WARM_WORKER": "1" if warm else "0"}
    client = Client([sys.executable, "-m", "memlens.server"], env)
    try:
        root = EXAMPLE.as_uri()
        client.request("initialize", {"processId": os.getpid(), "rootUri": root, "capabilities": {},
                                      "workspaceFolders": [{"uri": root, "name": "gpt"}],
                                      "initializationOptions": {"python": sys.executable}})
        client.notify("initialized", {})
        for name in ("train.py", "model.py"):  # annotations go to open documents
            path = EXAMPLE / name
            client.notify("textDocument/didOpen", {"textDocument": {
                "uri": path.as_uri(), "languageId": "python", "version": 1,
                "text": path.read_text()}})
        time.sleep(settle)
        return [first_annotation(client, "script:train.py") for _ in range(2)]
    finally:
        client.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--settle", type=float, default=30.0)
    a = p.parse_args()
    best = {"cold": [float("inf")] * 2, "warm": [float("inf")] * 2}
    for round_ in range(a.rounds):
        for mode in ("cold", "warm"):
            times = one_server(mode == "warm", a.settle)
            best[mode] = [min(b, t) for b, t in zip(best[mode], times)]
            print(f"round {round_ + 1} {mode}: first trace {times[0]:.2f} s, "
                  f"second {times[1]:.2f} s", flush=True)
    ratio = [w / c for w, c in zip(best["warm"], best["cold"])]
    print(f"best cold: {best['cold'][0]:.2f} / {best['cold'][1]:.2f} s; "
          f"best warm: {best['warm'][0]:.2f} / {best['warm'][1]:.2f} s; "
          f"warm/cold: {ratio[0]:.2f}x / {ratio[1]:.2f}x")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "warm_worker.json").write_text(json.dumps({
        "date": dt.date.today().isoformat(), "machine": platform.node(),
        "cpus": os.cpu_count(), "settle_s": a.settle,
        "best_s": best, "warm_over_cold": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
