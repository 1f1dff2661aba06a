"""Turn a finished trace into a snapshot document (format `memlens.snapshot`, version 1).

The snapshot is the contract between the engine and every reader (CLI tables, the language
server, the VS Code panel, the HTML report): docs/snapshot-format.md describes each field.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .. import __version__
from .. import categories as C
from .analysis import DeviceStats, group_key, live_at, replay
from .device_memory import device_memory
from .io import FORMAT, VERSION  # noqa: F401  (the reader owns them: it needs no torch)

if TYPE_CHECKING:  # the trace is handed in (trace_facts.py); never the engine
    from .ledger_facts import LedgerFacts
    from .trace_facts import ModulesFacts, StacksFacts, TraceFacts

DEFAULT_MAX_ALLOCATIONS = 1_000_000


def _cat_dict(values: list[int]) -> dict[str, int]:
    return {name: int(values[i]) for i, name in enumerate(C.NAMES)}


def _subcategories(ledger, device: str, live) -> list[dict[str, Any]]:
    """Each subcategory that held bytes on `device`: its bytes at the peak and its own peak
    (one walk over the events of its records only)."""
    records = ledger.records
    used = sorted({r.sub for r in records if r.sub and r.device == device})
    out = []
    for sub in used:
        current = peak = 0
        for ev in ledger.events:
            rec = records[ev if ev >= 0 else ~ev]
            if rec.sub != sub or rec.device != device:
                continue
            current += rec.size if ev >= 0 else -rec.size
            peak = max(peak, current)
        out.append({"name": C.SUB_NAMES[sub], "label": C.SUB_LABELS[sub],
                    "category": C.NAMES[C.SUB_PARENT[sub]],
                    "at_peak_bytes": sum(records[r].size for r in live if records[r].sub == sub),
                    "peak_bytes": peak})
    return out


class _Modules:
    """Fully qualified names for the traced modules. The first top-level module with parameters
    is the model: its names carry no prefix, and "" is the model itself. Other top-level modules
    (a loss module, a second model) are prefixed with their class name; modules outside every
    top-level module are named Class#index."""

    def __init__(self, tracker: ModulesFacts) -> None:
        self.tracker = tracker
        self.fqn: dict[int, str] = {}
        self.root_of: dict[int, str] = {}  # module index -> fqn of its top-level module
        self.order: list[int] = []
        main = next((i for i in tracker.top_level if i in tracker.has_parameters), None)
        prefix = {root: "" if root == main else tracker.infos[root].class_name
                  for root in tracker.top_level}
        names = sorted(tracker.names.items(), key=lambda kv: (kv[1][0] != main, kv[0]))
        for idx, (root, name) in names:
            self.fqn[idx] = ".".join(p for p in (prefix[root], name) if p)
            self.root_of[idx] = prefix[root]
            self.order.append(idx)

    def name_of(self, idx: int) -> str | None:
        if idx < 0:
            return None
        if idx not in self.fqn:  # a module outside every traced model
            info = self.tracker.infos[idx]
            self.fqn[idx] = self.root_of[idx] = f"{info.class_name}#{idx}"
            self.order.append(idx)
        return self.fqn[idx]

    def enclosing(self, idx: int) -> list[str]:
        """The module and every module that contains it, outermost first."""
        fqn = self.name_of(idx)
        if fqn is None:
            return []
        root = self.root_of[idx]
        rest = fqn[len(root):].lstrip(".")
        parts = rest.split(".") if rest else []
        base = [root]
        return base + [".".join(p for p in (root, ".".join(parts[:i])) if p)
                       for i in range(1, len(parts) + 1)]


def build_snapshot(tracer: TraceFacts, meta: dict[str, Any],
                   max_allocations: int = DEFAULT_MAX_ALLOCATIONS) -> dict[str, Any]:
    ledger: LedgerFacts = tracer.ledger
    records = ledger.records
    target = tracer.target_key
    devices = sorted({r.device for r in records} | {target}, key=lambda d: (d != target, d))
    phase_starts = [(p.name, p.start_seq) for p in tracer.phases.phases]
    stats: dict[str, DeviceStats] = {
        d: replay(ledger, d, phase_starts, tracer.end_seq) for d in devices}
    t = stats[target]
    live = live_at(ledger, target, t.peak_seq)  # the live set at the peak

    names = _Modules(tracer.modules)
    modules_out = _modules_section(tracer, t, live, names)
    index_of_fqn = {m["fqn"]: i for i, m in enumerate(modules_out)}

    def module_ref(idx: int) -> int:
        name = names.name_of(idx)
        return index_of_fqn.get(name, -1) if name is not None else -1

    tensors_out, peak_tensor = _tensors_section(ledger, live, t.peak_seq, module_ref)
    subs = _subcategories(ledger, target, live)
    phases_out = _phases_section(stats)
    n_events = len(ledger.events) if tracer.end_seq < 0 else \
        min(len(ledger.events), tracer.end_seq + 1)
    # The job's world size (a simulated rank's), not the caller's meta: NCCL rows need it.
    world_size = meta.get("world_size") or tracer.parallel_meta()["world_size"]
    memory, per_device = device_memory(tracer, stats, target, world_size, n_events)
    if memory.get("reserved_peak_seq") is not None:
        memory["reserved_peak_phase"] = _phase_at(phases_out, target, memory["reserved_peak_seq"])

    at_peak = [0] * len(C.NAMES)
    for rid in live:
        at_peak[records[rid].category] += records[rid].size
    return {
        "format": FORMAT,
        "version": VERSION,
        "meta": _meta_section(tracer, meta),
        "summary": {
            "peak_bytes": t.peak, "peak_seq": t.peak_seq,
            "peak_phase": _phase_at(phases_out, target, t.peak_seq),
            "peak_tensor": peak_tensor,
            "categories_at_peak": _cat_dict(at_peak),
            "category_peaks": _cat_dict(t.category_peaks),
            "final_bytes": t.final, "total_allocated_bytes": t.total_allocated,
            "allocation_count": t.allocations,
            **({"subcategories": subs} if subs else {}),
            "devices": {d: {"peak_bytes": s.peak, "final_bytes": s.final, **per_device.get(d, {}),
                            **({"graph_pools": _graph_pools(s, ledger)} if s.reserved_pools
                               else {})}
                        for d, s in stats.items()},
            "placeholders": [_placeholder(tracer.stacks, p)
                             for p in tracer.accountant.placeholders],
            **memory,
        },
        "phases": phases_out,
        "modules": modules_out,
        "lines": _lines_section(tracer, live),
        "tensors": tensors_out,
        "ops": list(ledger.ops),
        "frames": [{"file": f, "line": ln, "name": n} for f, ln, n in tracer.stacks.frames],
        "stacks": [list(s) for s in tracer.stacks.stacks],
        "timeline": _timeline(t, ledger),
        "allocations": (_allocations_section(ledger, devices, subs, module_ref)
                        if len(records) <= max_allocations else None),
    }


def _meta_section(tracer: TraceFacts, meta: dict[str, Any]) -> dict[str, Any]:
    """What was traced, where and with what; the caller's `meta` wins."""
    return {
        "tool": "memlens", "tool_version": __version__,
        "torch_version": _torch_version(), "python_version": platform.python_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": tracer.device.to_json(), "device_key": tracer.target_key,
        **tracer.parallel_meta(),
        "allocator": tracer.allocator_settings,
        "iterations": tracer.iterations,
        "duration_s": round(tracer.finished - tracer.started, 3),
        "iterations_traced": tracer.phases.iterations_traced,
        "iteration_unit": tracer.phases.counted,
        "interrupted": tracer.interrupted,
        **({"notes": list(tracer.notes)} if tracer.notes else {}),
        **({"compiled_regions": regions} if (regions := _compiled_regions(tracer)) else {}),
        **meta,
    }


def _modules_section(tracer: TraceFacts, t: DeviceStats, live: list[int],
                     names: _Modules) -> list[dict[str, Any]]:
    """One row per module (parents before children): its bytes per category, at the peak,
    and the highest live bytes while it allocated in forward and in backward."""
    ledger = tracer.ledger
    records = ledger.records
    target = tracer.target_key
    by_module: dict[str, dict[str, Any]] = {}

    def entry(fqn: str) -> dict[str, Any]:
        e = by_module.get(fqn)
        if e is None:
            e = by_module[fqn] = {"categories": [0] * len(C.NAMES), "at_peak": [0] * len(C.NAMES),
                                  "forward_peak_bytes": 0, "backward_peak_bytes": 0}
        return e

    for idx in names.order:
        entry(names.fqn[idx])
    # Bytes per category: what each module holds at the moment that category peaks during
    # training (set-up transients excluded).
    for c, seq in enumerate(t.steady_peak_seq):
        for rid in live_at(ledger, target, seq):
            if records[rid].category == c:
                for module, size in ledger.module_bytes(rid):
                    for p in names.enclosing(module) if module >= 0 else ():
                        entry(p)["categories"][c] += size
    for rid in live:
        category = records[rid].category
        for module, size in ledger.module_bytes(rid):
            for p in names.enclosing(module) if module >= 0 else ():
                entry(p)["at_peak"][category] += size
    current_after = t.current_after
    for rec in records:
        if rec.device == target and rec.module >= 0 and rec.alloc_seq < len(current_after):
            key = "backward_peak_bytes" if rec.backward else "forward_peak_bytes"
            cur = current_after[rec.alloc_seq]
            for p in names.enclosing(rec.module):
                e = entry(p)
                if cur > e[key]:
                    e[key] = cur

    modules_out = []
    fqn_to_idx = {v: k for k, v in names.fqn.items()}
    for fqn in sorted(by_module, key=lambda f: (f.count(".") if f else -1, f)):
        idx = fqn_to_idx.get(fqn)
        info = tracer.modules.infos[idx] if idx is not None else None
        e = by_module[fqn]
        src = info.source if info else None
        modules_out.append({
            "fqn": fqn,
            "class": info.class_name if info else "",
            "source": {"file": src[0], "line": src[1]} if src else None,
            "constructed_at": ({"file": info.constructed_at[0], "line": info.constructed_at[1]}
                               if info and info.constructed_at else None),
            "group": group_key(fqn),
            **{f"{name}_bytes": e["categories"][c] for c, name in enumerate(C.NAMES)},
            "at_peak": _cat_dict(e["at_peak"]),
            "forward_peak_bytes": e["forward_peak_bytes"],
            "backward_peak_bytes": e["backward_peak_bytes"],
        })
    return modules_out


def _lines_section(tracer: TraceFacts, live: list[int]) -> list[dict[str, Any]]:
    """Bytes by source line (the innermost frame of each allocation's stack), the line
    holding most at the peak first."""
    ledger, stacks = tracer.ledger, tracer.stacks
    lines: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # frame -> at peak, total, n
    live_set = set(live)
    for rid, rec in enumerate(ledger.records):
        if rec.device != tracer.target_key or rec.alloc_seq > tracer.end_seq >= 0:
            continue
        stack = stacks.stacks[rec.stack]
        if not stack:
            continue
        agg = lines[stack[0]]
        agg[1] += rec.size
        agg[2] += 1
        if rid in live_set:
            agg[0] += rec.size
    by_line: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for fid, (peak_b, total_b, n) in lines.items():
        f = stacks.frames[fid]
        acc = by_line[(f[0], f[1])]
        acc[0] += peak_b
        acc[1] += total_b
        acc[2] += n
    return [{"file": f, "line": ln, "bytes_at_peak": v[0], "total_bytes": v[1],
             "allocations": v[2]}
            for (f, ln), v in sorted(by_line.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))]


def _tensors_section(ledger: LedgerFacts, live: list[int], peak_seq: int,
                     module_ref) -> tuple[list[dict[str, Any]], int]:
    """The tensors live at the peak, largest first, and the index of the one whose
    allocation made the peak (-1: none)."""
    records = ledger.records
    peak_rid = ledger.events[peak_seq] if peak_seq >= 0 else -1
    tensors_out = []
    peak_tensor = -1
    for rid in sorted(live, key=lambda r: -records[r].size):
        rec = records[rid]
        if rid == peak_rid:
            peak_tensor = len(tensors_out)
        tensors_out.append({
            "id": rid, "bytes": rec.size, "requested_bytes": rec.nbytes,
            "shape": list(rec.shape), "dtype": rec.dtype,
            "category": C.NAMES[rec.category], "module": module_ref(rec.module),
            "phase": rec.phase, "op": ledger.ops[rec.op], "stack": rec.stack,
            **({"subcategory": C.SUB_NAMES[rec.sub]} if rec.sub else {})})
    return tensors_out, peak_tensor


def _allocations_section(ledger: LedgerFacts, devices: list[str], subs: list[dict[str, Any]],
                         module_ref) -> dict[str, Any]:
    """The full event stream, column by column, for allocator replay and memory_viz."""
    records = ledger.records
    sub_index = {C.SUB_NAMES.index(sub["name"]): i for i, sub in enumerate(subs)}
    dev_index = {d: i for i, d in enumerate(devices)}
    return {
        "devices": devices,
        "device": [dev_index[r.device] for r in records],
        "bytes": [r.size for r in records],
        "requested_bytes": [r.nbytes for r in records],
        "category": [r.category for r in records],
        "module": [module_ref(r.module) for r in records],
        "op": [r.op for r in records],
        "stack": [r.stack for r in records],
        "stream": [r.stream for r in records],
        "alloc_seq": [r.alloc_seq for r in records],
        "free_seq": [r.free_seq for r in records],
        "backward": [int(r.backward) for r in records],
        # index into summary.subcategories, -1 for none (only when there are some)
        **({"subcategory": [sub_index.get(r.sub, -1) for r in records]} if sub_index else {}),
        "stream_events": [_stream_event(e, dev_index) for e in ledger.stream_events],
        "stream_names": {str(k): name for k, (name, _) in sorted(ledger.stream_names.items())},
    }


def _phases_section(stats: dict[str, DeviceStats]) -> list[dict[str, Any]]:
    """Each phase on each device (target first): live bytes before, after and at its peak."""
    phases_out = []
    for d, device_stats in stats.items():
        for ph in device_stats.phases:
            row = {"name": ph.name, "device": d, "start_seq": ph.start_seq,
                   "end_seq": ph.end_seq, "current_before_bytes": ph.current_before,
                   "current_after_bytes": ph.current_after, "peak_bytes": ph.peak,
                   "peak_seq": ph.peak_seq,
                   "categories_before": _cat_dict(ph.categories_before),
                   "categories_after": _cat_dict(ph.categories_after),
                   "categories_at_peak": _cat_dict(ph.categories_at_peak)}
            if device_stats.has_allocator:
                row.update(reserved_before_bytes=ph.reserved_before,
                           reserved_after_bytes=ph.reserved_after,
                           reserved_peak_bytes=ph.reserved_peak,
                           reserved_peak_seq=ph.reserved_peak_seq)
            phases_out.append(row)
    return phases_out


def _phase_at(phases_out: list[dict[str, Any]], device: str, seq: int) -> str | None:
    return next((p["name"] for p in phases_out
                 if p["device"] == device and p["start_seq"] <= seq < p["end_seq"]), None)


def _timeline(t: DeviceStats, ledger: LedgerFacts) -> dict[str, Any]:
    """Live bytes over the trace; with an allocator model also its reserved bytes, in all and
    per stream (`streams` names each stream's column), at the same points."""
    columns = ["seq", "total", *C.NAMES]
    out: dict[str, Any] = {"columns": columns, "points": t.timeline,
                           "events": len(ledger.events)}
    if t.has_allocator:
        columns.append("reserved")
        out["streams"] = []
        for stream in t.reserved_streams:
            name, place = ledger.stream_names.get(stream, (
                "default stream" if stream == 0 else f"stream {stream}", None))
            columns.append(f"reserved:{stream}")
            out["streams"].append({"id": stream, "name": name, "place": place,
                                   "column": f"reserved:{stream}"})
        for pool in t.reserved_pools:
            columns.append(f"reserved_pool:{pool}")
            out.setdefault("pools", []).append({
                "id": pool, "name": ledger.graph_pools.get(pool, {}).get("name", f"pool {pool}"),
                "column": f"reserved_pool:{pool}"})
    return out


def _graph_pools(t: DeviceStats, ledger: LedgerFacts) -> list[dict[str, Any]]:
    """Each CUDA graph private pool of the device: the graphs captured into it and the
    segments it held (cuda/graphs.py, allocator/graph_pools.py)."""
    out = []
    for pool in t.reserved_pools:
        info = ledger.graph_pools.get(pool, {})
        peak, peak_seq, final = t.pool_reserved[pool]
        out.append({"id": pool, "name": info.get("name", f"pool {pool}"),
                    "graphs": list(info.get("graphs", [])), "replays": info.get("replays", 0),
                    "reserved_peak_bytes": peak, "reserved_peak_seq": peak_seq,
                    "reserved_final_bytes": final})
    return out


def _stream_event(event: tuple, dev_index: dict[str, int]) -> dict[str, Any]:
    """A record_stream, a wait between streams, a CUDA graph pool's capture start or end or
    release, or an empty_cache, after allocation event `seq`."""
    seq, device, kind = event[:3]
    out = {"seq": seq, "device": dev_index.get(device, -1), "kind": kind}
    if kind == "record_stream":
        out.update(allocation=event[3], stream=event[4])
    elif kind in ("pool_create", "pool_begin", "pool_join", "pool_end", "pool_release",
                  "empty_cache"):
        out.update(pool=event[3], stream=event[4])
    else:
        out.update(waiter=event[3], stream=event[4], marker=event[5])
    return out


def _placeholder(stacks: StacksFacts, p) -> dict[str, Any]:
    stack_id, op, value = p
    top = stacks.top_frame(stack_id)
    return {"file": top[0] if top else None, "line": top[1] if top else None, "op": op,
            "value": value}


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", "unknown")


def _compiled_regions(tracer: TraceFacts) -> list:
    return tracer.compiled.to_json()
