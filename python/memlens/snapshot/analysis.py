"""From the ledger's raw facts to what a user reads: phases, categories, modules, lines, the
live set at the peak. Pure bookkeeping over integers; nothing here touches torch."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import categories as C

if TYPE_CHECKING:  # the ledger is handed in (ledger_facts.py); never the engine
    from .ledger_facts import LedgerFacts

N_CAT = len(C.NAMES)
TIMELINE_POINTS = 2000


@dataclass
class PhaseStats:
    name: str
    device: str
    start_seq: int
    end_seq: int  # exclusive
    current_before: int
    current_after: int
    peak: int
    peak_seq: int
    categories_before: list[int]
    categories_after: list[int]
    categories_at_peak: list[int]
    # The allocator model's reserved bytes (0 on a device without one).
    reserved_before: int = 0
    reserved_after: int = 0
    reserved_peak: int = 0
    reserved_peak_seq: int = -1


@dataclass
class DeviceStats:
    device: str
    peak: int = 0
    peak_seq: int = -1
    final: int = 0
    total_allocated: int = 0
    allocations: int = 0
    category_peaks: list[int] = field(default_factory=lambda: [0] * N_CAT)
    category_peak_seq: list[int] = field(default_factory=lambda: [-1] * N_CAT)
    # The same, counting only from the first training iteration on: what the model holds while
    # it trains, without set-up transients (such as fp32 and bf16 weights side by side in .to()).
    steady_peaks: list[int] = field(default_factory=lambda: [0] * N_CAT)
    steady_peak_seq: list[int] = field(default_factory=lambda: [-1] * N_CAT)
    phases: list[PhaseStats] = field(default_factory=list)
    # [seq, total, *per category] and, with an allocator model, [reserved, *per stream,
    # *per CUDA graph pool]
    timeline: list[list[int]] = field(default_factory=list)
    reserved_streams: list[int] = field(default_factory=list)  # stream ids, timeline order
    reserved_pools: list[int] = field(default_factory=list)  # graph pool ids, timeline order
    # graph pool id -> [peak reserved, seq of that peak, reserved at the end]
    pool_reserved: dict[int, list[int]] = field(default_factory=dict)
    current_after: list[int] = field(default_factory=list)  # bytes on this device after each event
    # The caching allocator model (CUDA devices only): reserved memory at its peak, and the
    # model's allocated bytes and segments at that moment.
    has_allocator: bool = False
    reserved_peak: int = 0
    reserved_peak_seq: int = -1
    allocated_at_reserved_peak: int = 0
    segments_at_reserved_peak: int = 0
    reserved_final: int = 0


def replay(ledger: LedgerFacts, device: str, phase_starts: list[tuple[str, int]], end_seq: int
           ) -> DeviceStats:
    """Walk the events of one device in order: current bytes per category, peaks, phases."""
    records, events = ledger.records, ledger.events
    stats = DeviceStats(device)
    cat_cur = [0] * N_CAT
    cur = 0
    n_events = min(len(events), end_seq + 1) if end_seq >= 0 else len(events)
    bounds = [s for _, s in phase_starts[1:]] + [n_events]
    steady_from = phase_starts[1][1] if len(phase_starts) > 1 else 0
    phase_i, phase_peak, phase_peak_seq, phase_before = 0, 0, -1, 0
    changes = ledger.reserved.get(device, [])
    stats.has_allocator = device in ledger.allocators and ledger.allocators[device] is not None
    change_i, reserved = 0, 0
    # Streams whose pools ever held a segment, each a timeline column after "reserved".
    streams = sorted({s for change in changes for s in change[4]})
    stats.reserved_streams = streams
    pools = sorted({p for change in changes for p in change[5]})  # CUDA graphs' pools
    stats.reserved_pools = pools
    stats.pool_reserved = {p: [0, -1, 0] for p in pools}
    reserved_row = [0] * (len(streams) + len(pools) + 1) if stats.has_allocator else []
    res_before, res_peak, res_peak_seq = 0, 0, -1
    cats_before, cats_at_peak = [0] * N_CAT, [0] * N_CAT
    stride = max(1, n_events // TIMELINE_POINTS)
    best: list[int] | None = None

    def close_phase(end: int) -> None:
        name = phase_starts[phase_i][0]
        at_peak = cats_at_peak if phase_peak_seq >= 0 else cats_before
        stats.phases.append(PhaseStats(name, device, phase_starts[phase_i][1], end, phase_before,
                                       cur, max(phase_peak, phase_before), phase_peak_seq,
                                       cats_before, list(cat_cur), list(at_peak), res_before,
                                       reserved, max(res_peak, res_before), res_peak_seq))

    for seq in range(n_events):
        while phase_i < len(phase_starts) - 1 and seq >= bounds[phase_i]:
            close_phase(seq)
            phase_i += 1
            phase_before, phase_peak, phase_peak_seq = cur, cur, -1
            cats_before = list(cat_cur)
            res_before, res_peak, res_peak_seq = reserved, reserved, -1
        ev = events[seq]
        rid = ev if ev >= 0 else ~ev
        rec = records[rid]
        if rec.device == device:
            if ev >= 0:
                cur += rec.size
                cat_cur[rec.category] += rec.size
                stats.total_allocated += rec.size
                stats.allocations += 1
                if cur > stats.peak:
                    stats.peak, stats.peak_seq = cur, seq
                if cur > phase_peak:
                    phase_peak, phase_peak_seq = cur, seq
                    cats_at_peak = list(cat_cur)
            else:
                cur -= rec.size
                cat_cur[rec.category] -= rec.size
        while change_i < len(changes) and changes[change_i][0] <= seq:
            _, reserved, allocated, segments, by_stream, by_pool = changes[change_i]
            change_i += 1
            reserved_row = [reserved, *(by_stream.get(s, 0) for s in streams),
                            *(by_pool.get(p, 0) for p in pools)]
            for p, nbytes in by_pool.items():
                row = stats.pool_reserved[p]
                row[2] = nbytes
                if nbytes > row[0]:
                    row[0], row[1] = nbytes, seq
            if reserved > stats.reserved_peak:
                stats.reserved_peak, stats.reserved_peak_seq = reserved, seq
                stats.allocated_at_reserved_peak = allocated
                stats.segments_at_reserved_peak = segments
            if reserved > res_peak:
                res_peak, res_peak_seq = reserved, seq
        stats.current_after.append(cur)
        for c in range(N_CAT):
            if cat_cur[c] > stats.category_peaks[c]:
                stats.category_peaks[c], stats.category_peak_seq[c] = cat_cur[c], seq
            if seq >= steady_from and (cat_cur[c] > stats.steady_peaks[c]
                                       or stats.steady_peak_seq[c] < 0):
                stats.steady_peaks[c], stats.steady_peak_seq[c] = cat_cur[c], seq
        # Timeline: in each bucket of `stride` events keep the point with the most bytes, so
        # the drawn curve never hides the peak.
        point = [seq, cur, *cat_cur, *reserved_row]
        if best is None or cur >= best[1]:
            best = point
        if seq % stride == stride - 1 or seq == n_events - 1:
            stats.timeline.append(best)
            best = None
    while phase_i < len(phase_starts):
        close_phase(n_events)
        phase_i += 1
        phase_before, phase_peak, phase_peak_seq = cur, cur, -1
        cats_before = list(cat_cur)
        res_before, res_peak, res_peak_seq = reserved, reserved, -1
    stats.final = cur
    stats.reserved_final = reserved
    return stats


def live_at(ledger: LedgerFacts, device: str, seq: int) -> list[int]:
    """Record ids alive on `device` right after event `seq`."""
    if seq < 0:
        return []
    return [rid for rid, r in enumerate(ledger.records)
            if r.device == device and r.alloc_seq <= seq and (r.free_seq < 0 or r.free_seq > seq)]


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)")


def group_key(fqn: str) -> str:
    """'layers.3.attn' -> 'layers.*.attn': repeated structures share one key."""
    return _INDEX.sub("*", fqn)
