"""Helpers of the distributed tests: trace simulated ranks through the CLI (in parallel, each in
its own process), read exact numbers back out of a snapshot's allocation stream, and FSDP's
arithmetic of shards."""

from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support.paths import TESTS
from support.runs import run_memlens

SCRIPTS = TESTS / "scripts" / "distributed"
# The target the product is for: a GPU, simulated on this CPU-only machine.
DEVICE = os.environ.get("MEMLENS_TEST_DEVICE", "h100-80gb")
CATEGORIES = ("parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary",
              "input", "other")


def trace(tmp: Path, script: str, world: int, rank: int, *args: str,
          device: str = DEVICE, extra: tuple[str, ...] = ()) -> dict:
    """The snapshot of one simulated rank (`memlens run --world-size W --rank R`)."""
    name = f"{Path(script).stem}-w{world}-r{rank}-{uuid.uuid4().hex[:8]}"
    snap = tmp / f"{name}.json"
    out = run_memlens("run", "--device", device, "--world-size", str(world), "--rank",
                      str(rank), "--json", "--progress", "none", "--snapshot", str(snap), *extra,
                      "--", str(SCRIPTS / script), *args, cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


def trace_all(tmp: Path, runs: list[tuple], device: str = DEVICE) -> list[dict]:
    """Several `trace(tmp, *run)` at once (each is a process; the machine has few cores)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(lambda run: trace(tmp, *run, device=device), runs))


# -- FSDP's shards -------------------------------------------------------------------------------
def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def rows_of(length: int, world: int, rank: int) -> int:
    """torch.chunk's rule, which FSDP follows: chunks of ceil(n / world), the last ones short."""
    size = -(-length // world)
    return max(0, min(size, length - rank * size))


def padded_shard(shape, world: int) -> int:
    """What FSDP allocates each rank: dim 0 padded to a multiple of the world size, split
    evenly."""
    return -(-shape[0] // world) * numel(shape[1:])


def local_shard(shape, world: int, rank: int) -> int:
    """The rank's own rows, unpadded (what DTensor's local tensor, and so Adam's state,
    holds)."""
    return rows_of(shape[0], world, rank) * numel(shape[1:])


# -- reading the allocation stream ----------------------------------------------------------
def _rows(snap: dict, device: str | None = None):
    a = snap["allocations"]
    assert a is not None, "the snapshot has no allocation stream"
    want = a["devices"].index(device or snap["meta"]["device_key"])
    for i in range(len(a["bytes"])):
        if a["device"][i] == want:
            yield {k: a[k][i] for k in ("bytes", "requested_bytes", "category", "op",
                                         "alloc_seq", "free_seq")}


def phase_start(snap: dict, name: str) -> int:
    return next(p["start_seq"] for p in snap["phases"] if p["name"] == name)


def live_requested(snap: dict, seq: int, device: str | None = None) -> dict[str, int]:
    """Requested bytes alive right before event `seq`, by category (no allocator rounding)."""
    out = dict.fromkeys(CATEGORIES, 0)
    for r in _rows(snap, device):
        if r["alloc_seq"] < seq and (r["free_seq"] < 0 or r["free_seq"] >= seq):
            out[CATEGORIES[r["category"]]] += r["requested_bytes"]
    return out


def model_state_bytes(snap: dict, phase: str = "optimizer_step_iter_1",
                      device: str | None = None) -> dict[str, int]:
    """Parameters, gradients and optimizer states alive when `phase` begins."""
    live = live_requested(snap, phase_start(snap, phase), device)
    return {k: live[k] for k in ("parameter", "gradient", "optimizer_state")}


def peak_of(snap: dict, size=lambda r: r["requested_bytes"], device: str | None = None,
            phases: tuple[str, ...] | None = None, without: tuple[str, ...] = ()) -> int:
    """The highest total of `size(row)` over the live allocations at any moment (within the
    named phases; leaving out the categories `without`)."""
    rows = {p["name"]: p for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]}
    windows = [(rows[p]["start_seq"], rows[p]["end_seq"]) for p in phases] if phases else \
        [(0, 1 << 62)]
    events = []
    for r in _rows(snap, device):
        if CATEGORIES[r["category"]] in without:
            continue
        events.append((r["alloc_seq"], size(r)))
        if r["free_seq"] >= 0:
            events.append((r["free_seq"], -size(r)))
    events.sort()
    current = best = 0
    for seq, delta in events:
        current += delta
        if any(lo <= seq < hi for lo, hi in windows):
            best = max(best, current)
    return best


def max_alive(snap: dict, op: str, device: str | None = None) -> int:
    """The most allocations made by aten op `op` alive at once."""
    if op not in snap["ops"]:
        return 0
    oid = snap["ops"].index(op)
    events = []
    for r in _rows(snap, device):
        if r["op"] == oid:
            events.append((r["alloc_seq"], 1))
            if r["free_seq"] >= 0:
                events.append((r["free_seq"], -1))
    events.sort()
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def allocations_of(snap: dict, requested: int, phase: str | None = None,
                   device: str | None = None) -> int:
    """How many allocations of exactly `requested` bytes were made (within `phase`)."""
    lo, hi = 0, 1 << 62
    if phase is not None:
        row = next(p for p in snap["phases"] if p["name"] == phase)
        lo, hi = row["start_seq"], row["end_seq"]
    return sum(1 for r in _rows(snap, device)
               if r["requested_bytes"] == requested and lo <= r["alloc_seq"] < hi)


def op_allocations(snap: dict, op: str, phase: str = "forward_backward_iter_1") -> list[int]:
    """Requested bytes of what aten op `op` allocated within `phase` on the traced device, in
    the order allocated."""
    row = next(p for p in snap["phases"] if p["name"] == phase
               and p["device"] == snap["meta"]["device_key"])
    oid = snap["ops"].index(op)
    return [r["requested_bytes"] for r in _rows(snap) if r["op"] == oid
            and row["start_seq"] <= r["alloc_seq"] < row["end_seq"]]


def module(snap: dict, fqn: str) -> dict:
    return next(m for m in snap["modules"] if m["fqn"] == fqn)
