"""Will the step fit on the card? Reserved memory, memory outside the allocator, the verdict.

From a finished trace: the caching-allocator model's reserved peak on each CUDA device (and
its fragmentation and segments at that moment), the device memory PyTorch's allocator never
sees (the CUDA context, NCCL buffers) as labelled line items with their basis, the library
workspaces it does see (cuBLAS), and the verdict: fits with its headroom, or the first
allocation the modelled allocator refused. A CPU target has no allocator: its verdict compares
the allocated peak with the host's memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..allocator import nccl, outside
from .analysis import DeviceStats
from ..units import format_bytes
from ..kernels.cuda import CUBLAS_WORKSPACE_OP

if TYPE_CHECKING:  # handed in, never imported: the engine is above this room
    from .trace_facts import TraceFacts

CONV_OPS = frozenset({"convolution", "_convolution", "cudnn_convolution",
                      "cudnn_convolution_transpose", "convolution_backward"})


def device_memory(tracer: TraceFacts, stats: dict[str, DeviceStats], target: str,
                  world_size: int, n_events: int
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(summary fields for the target, extra fields per CUDA device)."""
    total = tracer.device.total_memory_bytes
    if tracer.device.type != "cuda":
        peak = stats[target].peak
        return ({"reserved_peak_bytes": None, "outside_allocator": None,
                 "outside_allocator_bytes": None, "fits": peak <= total,
                 "headroom_bytes": total - peak, "oom": None}, {})
    oom = first_oom(tracer, n_events)
    if oom is not None:
        oom["reserved_needed_bytes"] = reserved_without_limit(tracer, oom["device"], n_events)
    per_device = {}
    for device, s in stats.items():
        if device.startswith("cuda"):
            per_device[device] = _device(tracer, device, s, world_size, n_events, total,
                                         oom if oom and oom["device"] == device else None)
    t = per_device.get(target) or _device(tracer, target, stats[target], world_size, n_events,
                                          total, None)
    summary = {**t, "fits": all(d["fits"] for d in per_device.values()) and t["fits"],
               "oom": oom}
    return summary, {d: {k: v for k, v in e.items() if k != "outside_allocator"}
                     for d, e in per_device.items()}


def _device(tracer: TraceFacts, device: str, s: DeviceStats, world_size: int, n_events: int,
            total: int, oom) -> dict[str, Any]:
    items = outside_items(tracer, device, world_size, n_events)
    outside_bytes = sum(i["bytes"] for i in items if not i["counted_by_allocator"])
    # After an OOM the model's reserved peak lacks what it refused: the headroom (negative)
    # comes from what the step needs on a card without a limit.
    used = (oom["reserved_needed_bytes"] if oom else s.reserved_peak) + outside_bytes
    return {
        "reserved_peak_bytes": s.reserved_peak,
        "reserved_peak_seq": s.reserved_peak_seq,
        "allocated_at_reserved_peak_bytes": s.allocated_at_reserved_peak,
        # Cached but unused at the reserved peak: what fragmentation and caching cost.
        "fragmentation_bytes": s.reserved_peak - s.allocated_at_reserved_peak,
        "segments_at_reserved_peak": s.segments_at_reserved_peak,
        "reserved_final_bytes": s.reserved_final,
        "outside_allocator": items,
        "outside_allocator_bytes": outside_bytes,
        "fits": oom is None and used <= total,
        "headroom_bytes": total - used,
    }


def _item(item: outside.OutsideItem, short: str) -> dict[str, Any]:
    return {"label": item.label, "bytes": item.bytes, "basis": item.basis,
            "short_basis": short, "counted_by_allocator": item.counted_by_allocator}


def outside_items(tracer: TraceFacts, device: str, world_size: int,
                  n_events: int) -> list[dict[str, Any]]:
    """Line items next to the allocator's numbers for one CUDA device of the traced process."""
    spec = tracer.device
    [context] = outside.cuda_context_items(spec.name)
    eager = context.basis.startswith("CUDA_MODULE_LOADING=EAGER")
    items = [_item(context, "estimate, " + ("eager" if eager else "lazy") + " module loading")]
    ledger = tracer.ledger
    ops = ledger.ops
    mine = [r for r in ledger.records if r.device == device and r.alloc_seq < n_events]
    items += _cublas(tracer, [r for r in mine if ops[r.op] == CUBLAS_WORKSPACE_OP])
    if any(ops[r.op] in CONV_OPS for r in mine):
        [cudnn] = outside.cudnn_workspace_items()
        items.append(_item(cudnn, "transient; " + (
            "CUDNN_CONV_WSCAP_DBG cap" if cudnn.bytes else "not estimated")))
    if world_size > 1:
        items += _nccl(tracer, device, world_size)
    items += [_item(item, short) for key, item, short in tracer.outside if key == device]
    return items


def _cublas(tracer: TraceFacts, workspaces) -> list[dict[str, Any]]:
    """One row per stream that ran matmuls: a workspace per (thread's handle, stream)."""
    spec = tracer.device
    by_stream: dict[int, list] = {}
    for r in workspaces:
        by_stream.setdefault(r.stream, []).append(r)
    rows = []
    for stream in sorted(by_stream):
        records = by_stream[stream]
        [cublas] = outside.cublas_workspace_items(spec.major, spec.minor)[:1]
        # one per handle (the main thread's, autograd's): a workspace cleared and taken
        # again (around a CUDA graph tree's warm-up) is the same handle's
        n, each = len({r.backward for r in records}), records[0].nbytes
        where = "the default stream" if stream == 0 else f"stream {stream}"
        label = f"cuBLAS workspace x{n}" + ("" if stream == 0 else f" (stream {stream})")
        most = _most_alive_at_once(records)
        cleared = "" if most >= n * records[0].size else \
            f", freed between uses: at most {format_bytes(most)} at once"
        rows.append({
            "label": label, "bytes": most,
            "basis": cublas.basis + f"; on {where}: {n} thread(s) ran matmuls there (forward "
                     "and the optimizer on the main thread, backward on autograd's device "
                     "thread, each with its own handle)",
            "short_basis": f"{n} handle x {format_bytes(each)} on {where}, compute capability "
                           f"{spec.major}.{spec.minor}{cleared}",
            "counted_by_allocator": True})
    return rows


def _most_alive_at_once(records) -> int:
    """The most bytes of `records` allocated at one time (a workspace freed and taken again
    counts once)."""
    changes = sorted([(r.alloc_seq, r.size) for r in records] +
                     [(r.free_seq, -r.size) for r in records if r.free_seq >= 0])
    alive = most = 0
    for _, change in changes:
        alive += change
        most = max(most, alive)
    return most


def _nccl(tracer: TraceFacts, device: str, world_size: int) -> list[dict[str, Any]]:
    """One row per communicator (process group) that ran an operation on this device."""
    rules = tracer.workspaces.cuda
    groups = rules.communicators.get(device, {}) if rules is not None else {}
    rows = []
    spec = tracer.device
    for use in groups.values():
        comm = nccl.Communicator(use["name"], use["ranks"], use["ring"], frozenset(use["send"]),
                                 frozenset(use["recv"]))
        nbytes, basis = nccl.communicator_bytes(comm, spec.name, (spec.major, spec.minor))
        kinds = (["ring"] if comm.ring else []) + \
            ([f"p2p x{len(comm.send_peers) + len(comm.recv_peers)}"]
             if comm.send_peers or comm.recv_peers else [])
        rows.append({"label": f"NCCL buffers ({comm.name}, {comm.ranks} ranks)", "bytes": nbytes,
                     "basis": basis,
                     "short_basis": f"{' + '.join(kinds)} connections; approximate",
                     "counted_by_allocator": False})
    if rows:
        return rows
    return [{"label": f"NCCL buffers (world {world_size})", "bytes": 0,
             "basis": "no collective ran on this device in the traced step; NCCL creates a "
                      "communicator and its buffers at a process group's first operation",
             "short_basis": "no collective ran", "counted_by_allocator": False}]


def first_oom(tracer: TraceFacts, n_events: int) -> dict[str, Any] | None:
    """The first allocation the modelled allocator refused, as the user's code made it."""
    ledger = tracer.ledger
    for rid, info in ledger.ooms:
        rec = ledger.records[rid]
        if rec.alloc_seq >= n_events:
            break
        top = tracer.stacks.top_frame(rec.stack)
        phases = tracer.phases.phases
        return {
            "device": rec.device, "seq": rec.alloc_seq, "op": ledger.ops[rec.op],
            "phase": phases[rec.phase].name if 0 <= rec.phase < len(phases) else None,
            "file": top[0] if top else None, "line": top[1] if top else None,
            "stack": rec.stack, "requested_bytes": info.requested,
            "tried_to_allocate_bytes": info.alloc_size, "allocated_bytes": info.allocated,
            "reserved_bytes": info.reserved, "free_bytes": info.device_free,
            "message": info.message,
        }
    return None


def reserved_without_limit(tracer: TraceFacts, device: str, n_events: int) -> int:
    """The reserved peak the step would reach on a card with no memory limit: how much it
    needs, once the modelled allocator has refused an allocation."""
    from ..allocator import parse_alloc_conf, replay

    events = tracer.ledger.allocator_events(device, n_events)
    config = parse_alloc_conf(tracer.allocator_settings["config"])
    # No limit on what cudaMalloc may take; expandable segments still size their address
    # range from a capacity, so give them room for a step four times the card.
    card = tracer.device.total_memory_bytes
    return replay(events, config, device_total_bytes=1 << 62, capacity_bytes=4 * card,
                  memory_fraction=1.0).peak_reserved
