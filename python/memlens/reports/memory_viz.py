"""Export a snapshot to PyTorch's memory snapshot format, for pytorch.org/memory_viz and
`torch.cuda._memory_viz` (segsum, trace, trace_plot, segment_plot).

The snapshot keeps the allocation stream (`allocations`); replaying it through the caching
allocator model, with the configuration and limit the trace used, gives back the addresses,
segments and the allocator's trace entries (segment_alloc, alloc, free_requested,
free_completed, segment_free, oom, and segment_map / segment_unmap with expandable segments),
as torch.cuda.memory._snapshot() would show them after the step with history recording on
from the start. Frames come from the snapshot's stack tables (user frames only, innermost
first); `category` carries memlens' category names.

Shape notes, for the viewer's sake: only plain dicts, lists, strings, ints, booleans and None
(its JavaScript unpickler reads nothing else, protocol <= 4); an `oom` entry carries
`device_free` instead of `addr`, as PyTorch's does; `time_us` holds the event number, not
time; segment entries are categorised "unknown" (a segment holds blocks of many categories,
and the viewer expects "unknown" among the categories once any entry has one).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from .. import categories as C
from ..allocator import CachingAllocatorModel, memory_snapshot, parse_alloc_conf
from ..allocator.config import AllocatorConfigError
from ..allocator.replay import POOL_EVENTS, pool_event
from ..errors import MemlensError, SnapshotError

PICKLE_PROTOCOL = 4  # the viewer's unpickler refuses newer protocols
SEGMENT_CATEGORY = "unknown"


def export_memory_viz(snap: dict[str, Any], path: str | Path) -> Path:
    from ..snapshot.output_files import write_atomically

    data = pickle.dumps(memory_viz_snapshot(snap), protocol=PICKLE_PROTOCOL)
    return Path(write_atomically(path, lambda f: f.write(data), "memory_viz export",
                                 binary=True))


def memory_viz_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """{"segments": [...], "device_traces": [[...] per CUDA device index], ...}."""
    meta, alloc = snap["meta"], snap.get("allocations")
    if meta["device"]["type"] != "cuda":
        raise MemlensError("memory_viz shows the CUDA caching allocator; this snapshot is of a "
                           f"{meta['device']['type']} target")
    if alloc is None:
        raise MemlensError("this snapshot has no allocation stream (the trace made more "
                           "allocations than --max-allocations); trace again with a larger "
                           "--max-allocations to export it")
    frames = _Frames(snap)
    horizon = max((p["end_seq"] for p in snap["phases"]), default=snap["timeline"]["events"])
    segments, traces = [], []
    for index, name in enumerate(alloc["devices"]):
        device = _cuda_index(name, index)
        if device is None:
            continue
        model = _model(meta, device)
        trace = _replay(model, alloc, index, horizon, frames)
        state = memory_snapshot(model)
        segments.extend(_segment(seg, alloc, frames) for seg in state["segments"])
        traces.extend([] for _ in range(device + 1 - len(traces)))
        traces[device] = trace
    settings = meta.get("allocator") or {}
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": settings.get("config", ""),
                                   "expandable_segments":
                                       bool(settings.get("expandable_segments", False))}}


MAX_CUDA_INDEX = 1023  # far above any machine's GPU count; device_traces has one list per index


def _cuda_index(name: str, position: int) -> int | None:
    """The CUDA device index of a device name ("cuda", "cuda:3"), None for another device."""
    if not name.startswith("cuda"):
        return None
    kind, _, index = name.partition(":")
    if kind != "cuda" or not (index == "" or index.isascii() and index.isdigit()) or \
            int(index or 0) > MAX_CUDA_INDEX:
        raise SnapshotError(f"invalid snapshot at allocations/devices/{position}: "
                            f"{name[:100]!r} is not a CUDA device name (cuda:0 … cuda:{MAX_CUDA_INDEX})")
    return int(index or 0)


class _Frames:
    """Stack id -> PyTorch frame list, built once per stack so pickle stores each once."""

    def __init__(self, snap: dict[str, Any]) -> None:
        table = [{"filename": f["file"], "line": f["line"], "name": f["name"]}
                 for f in snap["frames"]]
        self._stacks = [[table[i] for i in stack] for stack in snap["stacks"]]

    def of(self, stack: int) -> list[dict[str, Any]]:
        return self._stacks[stack]


def _model(meta: dict[str, Any], device: int) -> CachingAllocatorModel:
    """The allocator as the trace configured it."""
    settings = meta.get("allocator")
    capacity = meta["device"]["total_memory_bytes"]
    if settings is None:  # no CUDA allocation was made: nothing will be replayed
        return CachingAllocatorModel(None, capacity, device_index=device, record_history=True)
    try:  # the snapshot may come from someone else: its configuration is one more input
        config = parse_alloc_conf(settings["config"])
    except AllocatorConfigError as e:
        raise SnapshotError(f"invalid snapshot at meta/allocator/config: {str(e)[:200]}") from None
    return CachingAllocatorModel(config, settings["limit_bytes"],
                                 capacity_bytes=settings["capacity_bytes"],
                                 device_index=device, record_history=True)


def _events(alloc: dict[str, Any], device_index: int, horizon: int) -> list[tuple[int, int]]:
    """(seq, allocation id) for allocs and (seq, ~id) for frees of one device, in order."""
    events = []
    for i, d in enumerate(alloc["device"]):
        if d != device_index or alloc["alloc_seq"][i] >= horizon:
            continue
        events.append((alloc["alloc_seq"][i], i))
        free = alloc["free_seq"][i]
        if 0 <= free < horizon:
            events.append((free, ~i))
    events.sort()
    return events


def _stream_event(model: CachingAllocatorModel, event: dict[str, Any], refused: set[int]) -> None:
    if event["kind"] in POOL_EVENTS:
        pool_event(model, event["kind"], event["pool"], event["stream"])
    elif event["kind"] == "record_stream":
        if event["allocation"] not in refused:
            model.record_stream(event["allocation"], event["stream"])
    else:
        model.stream_waited(event["waiter"], event["stream"], event["marker"])


def _replay(model: CachingAllocatorModel, alloc: dict[str, Any], device_index: int,
            horizon: int, frames: _Frames) -> list[dict[str, Any]]:
    history = model.history
    refused: set[int] = set()
    # record_stream and the waits between streams, each after its allocation event
    streams = [e for e in alloc.get("stream_events") or () if e["device"] == device_index]
    k = 0

    def stream_events_before(seq: int) -> None:
        nonlocal k
        while k < len(streams) and streams[k]["seq"] < seq:
            start = len(history)
            _stream_event(model, streams[k], refused)
            for entry in history[start:]:  # an empty_cache's segment frees: no caller's frames
                entry.pop("block_id")
                entry.update(frames=[], time_us=streams[k]["seq"], category=SEGMENT_CATEGORY)
            k += 1

    for seq, ev in _events(alloc, device_index, horizon):
        stream_events_before(seq)
        i = ev if ev >= 0 else ~ev
        start = len(history)
        if ev >= 0:
            if not model.malloc(i, alloc["requested_bytes"][i], alloc["stream"][i]).ok:
                refused.add(i)  # PyTorch raised here; the trace went on without it
        elif i not in refused:
            model.free(i)
        # Entries this call made (segments, the block, an OOM) share its context.
        for entry in history[start:]:
            _decorate(entry, i, seq, alloc, frames)
    stream_events_before(horizon)  # those after the last allocation event (an empty_cache)
    return history


def _decorate(entry: dict[str, Any], i: int, seq: int, alloc: dict[str, Any],
              frames: _Frames) -> None:
    block_id = entry.pop("block_id")
    entry["frames"] = frames.of(alloc["stack"][i])
    entry["time_us"] = seq
    entry["category"] = C.NAMES[alloc["category"][i]] if block_id is not None \
        else SEGMENT_CATEGORY
    if entry["action"] == "oom":
        entry["device_free"] = entry.pop("addr")


def _segment(seg: dict[str, Any], alloc: dict[str, Any], frames: _Frames) -> dict[str, Any]:
    seg = dict(seg, segment_pool_id=list(seg["segment_pool_id"]))
    blocks = []
    for block in seg["blocks"]:
        block = dict(block)
        i = block.pop("block_id")
        if i is not None:
            block["frames"] = frames.of(alloc["stack"][i])
        blocks.append(block)
    seg["blocks"] = blocks
    return seg
