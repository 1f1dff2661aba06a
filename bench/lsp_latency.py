"""Language server latency and footprint against a Llama-7B-shaped snapshot.

    python bench/lsp_latency.py                  # trace bench/llama7b_step.py once, then measure
    python bench/lsp_latency.py --snapshot S.json --requests 1000

Measures, over stdio with a minimal JSON-RPC client (so the numbers are the server's, not a
test framework's): hover and inlay-hint latency (median and p99 over --requests each) on the
files the snapshot annotates, and the server's resident memory when idle with the snapshot
loaded. Checks that torch is not in the server process. Writes bench/results/lsp_latency.json.

The snapshot is a real trace: `memlens run --device cpu -- bench/llama7b_step.py` (Hugging
Face LlamaForCausalLM, hidden 4096, intermediate 11008, 32 layers, 32 heads, vocabulary 32000,
bf16, batch 1 x 2048 tokens, AdamW, two iterations), made once and cached in bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PYTHONPATH = str(REPO / "python")


class Client:
    """Just enough of an LSP client: requests, notifications, answers to the server's requests."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.notifications: list[dict] = []

    def _send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def _read(self) -> dict:
        length = 0
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return json.loads(self.proc.stdout.read(length))

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params) -> tuple[object, float]:
        """(result, seconds from sending to the answer)."""
        self.next_id += 1
        rid = self.next_id
        start = time.perf_counter()
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            msg = self._read()
            if msg.get("id") == rid and "method" not in msg:
                elapsed = time.perf_counter() - start
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result"), elapsed
            if "method" in msg and "id" in msg:  # the server asks something: answer plainly
                result = [None] if msg["method"] == "workspace/configuration" else None
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            elif "method" in msg:
                self.notifications.append(msg)

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(10)
        except Exception:
            self.proc.kill()


def make_snapshot(path: Path) -> None:
    print(f"tracing bench/llama7b_step.py into {path} (takes a minute or two)...", flush=True)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    subprocess.run([sys.executable, "-m", "memlens", "run", "--device", "cpu", "--json",
                    "--progress", "none", "--snapshot", str(path), "--",
                    str(REPO / "bench" / "llama7b_step.py")], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def rss_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snapshot", type=Path, default=RESULTS / "llama7b.json")
    p.add_argument("--requests", type=int, default=1000)
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.snapshot.exists():
        make_snapshot(args.snapshot)
    snap = json.loads(args.snapshot.read_text())
    files = sorted({m["source"]["file"] for m in snap["modules"] if m["source"]}
                   | {ln["file"] for ln in snap["lines"]})
    files = [f for f in files if os.path.isfile(f) and "/torch/" not in f]

    ws = Path(tempfile.mkdtemp(prefix="memlens-bench-"))
    (ws / ".memlens" / "bench-llama7b").mkdir(parents=True)
    shutil.copy(args.snapshot, ws / ".memlens" / "bench-llama7b" / "20260101-000000-000000.json")
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    client = Client([sys.executable, "-m", "memlens.server"], env)
    try:
        caps = {"textDocument": {"hover": {"contentFormat": ["markdown"]}, "inlayHint": {}},
                "workspace": {"configuration": True}, "window": {"workDoneProgress": True}}
        started = time.perf_counter()
        client.request("initialize", {"processId": os.getpid(), "rootUri": ws.as_uri(),
                                      "capabilities": caps,
                                      "workspaceFolders": [{"uri": ws.as_uri(), "name": "b"}],
                                      "initializationOptions": {"settings": {"device": "cpu"}}})
        client.notify("initialized", {})
        docs = {}
        for f in files:
            text = Path(f).read_text()
            uri = Path(f).as_uri()
            client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": text}})
            docs[uri] = text.count("\n") + 1
        # Wait for the snapshot to be read (helper process) and the hints to appear.
        hinted: dict[str, list[int]] = {}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(hinted) < len(docs):
            for uri, n in docs.items():
                res, _ = client.request("textDocument/inlayHint", {
                    "textDocument": {"uri": uri},
                    "range": {"start": {"line": 0, "character": 0},
                              "end": {"line": n, "character": 0}}})
                if res:
                    hinted[uri] = [h["position"]["line"] for h in res]
            time.sleep(0.2)
        ready_s = time.perf_counter() - started
        if not hinted:
            raise SystemExit("the server never showed hints for the snapshot")
        info, _ = client.request("memlens/serverInfo", {})
        maps = open(f"/proc/{info['pid']}/maps").read()

        targets = [(uri, line) for uri, lines in hinted.items() for line in lines]
        n = args.requests
        for i in range(50):  # warm-up
            uri, line = targets[i % len(targets)]
            client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                  "position": {"line": line, "character": 0}})
        hover_ms = []
        for i in range(n):
            uri, line = targets[i % len(targets)]
            res, dt = client.request("textDocument/hover", {
                "textDocument": {"uri": uri}, "position": {"line": line, "character": 0}})
            assert res and "share of peak" in res["contents"]["value"]
            hover_ms.append(1000 * dt)
        hint_ms = []
        uris = list(hinted)
        for i in range(n):
            uri = uris[i % len(uris)]
            res, dt = client.request("textDocument/inlayHint", {
                "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0},
                                                        "end": {"line": docs[uri],
                                                                "character": 0}}})
            assert res
            hint_ms.append(1000 * dt)
        time.sleep(3)  # idle: the poll timer keeps running, nothing else
        mem = rss_kib(info["pid"])
        result = {
            "snapshot": str(args.snapshot), "snapshot_bytes": args.snapshot.stat().st_size,
            "modules": len(snap["modules"]), "tensors_at_peak": len(snap["tensors"]),
            "allocations": len(snap["allocations"]["bytes"]) if snap["allocations"] else None,
            "documents": {u: len(v) for u, v in hinted.items()},
            "requests": n, "ready_s": round(ready_s, 2),
            "hover_ms": {"median": round(statistics.median(hover_ms), 3),
                         "p99": round(percentile(hover_ms, 0.99), 3),
                         "max": round(max(hover_ms), 3)},
            "inlay_hint_ms": {"median": round(statistics.median(hint_ms), 3),
                              "p99": round(percentile(hint_ms, 0.99), 3),
                              "max": round(max(hint_ms), 3)},
            "idle_rss_mib": round(mem["VmRSS"] / 1024, 1),
            "peak_rss_mib": round(mem["VmHWM"] / 1024, 1),
            "torch_imported": info["torchImported"], "libtorch_mapped": "libtorch" in maps,
            "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "load_avg": os.getloadavg()[0],
        }
    finally:
        client.close()
        shutil.rmtree(ws, ignore_errors=True)
    (RESULTS / "lsp_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    ok = result["hover_ms"]["p99"] < 20 and result["inlay_hint_ms"]["p99"] < 20 and \
        not result["torch_imported"] and not result["libtorch_mapped"]
    print("targets (p99 < 20 ms, no torch in the server):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
