"""What each pipeline stage holds at once in Megatron's training schedules, and the fewest
micro-batches per iteration that make every stage hold the same.

Pure (no Megatron import). The schedules, as megatron.core.pipeline_parallel.schedules runs them:

- no pipelining (PP 1): one micro-batch forward and backward at a time;
- 1F1B (PP > 1): stage r runs min(PP - r - 1, N) forwards as warm-up, then one forward and one
  backward in turn; it holds min(PP - r, N) micro-batches at once;
- interleaved (V model chunks per stage): the forwards follow Megatron's schedule table (groups
  of `group` micro-batches, each group through chunk 0, then chunk 1, ...; the last group holds
  the rest), the backwards the same table with the chunks reversed; the warm-up is
  (PP - r - 1) * 2 + (V - 1) * group forwards (+1 with MoE communication overlap), at most all.

A stage's memory at a moment is what its in-flight forwards hold, and chunks differ (the first
has the embedding, the last the output layer), so `held` answers, for each moment right after a
forward, how many micro-batches of each chunk are in flight. Fewer micro-batches hold the same
when every stage goes through the same such states: `fewest_alike` looks for that number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pipeline:
    stages: int  # pipeline-parallel size
    chunks: int = 1  # model chunks per stage (virtual pipeline size); 1: not interleaved
    group: int | None = None  # micro-batches per group through a chunk (default: stages)
    extra_warmup: int = 0  # overlap_moe_expert_parallel_comm's extra warm-up forward

    @property
    def group_size(self) -> int:
        return self.group or self.stages

    @property
    def interleaved(self) -> bool:
        return self.stages > 1 and self.chunks > 1


def warmup(p: Pipeline, stage: int, n: int) -> int:
    """Forwards stage `stage` runs before its first backward (Megatron's warm-up count)."""
    total = n * p.chunks
    if p.stages == 1:
        return 0
    if not p.interleaved:
        count = p.stages - stage - 1
    else:
        count = (p.stages - stage - 1) * 2 + (p.chunks - 1) * p.group_size + p.extra_warmup
    return min(count, total)


def chunk_order(p: Pipeline, n: int) -> list[int]:
    """The model chunk of each forward, in the order the stage runs them."""
    order: list[int] = []
    for first in range(0, n, p.group_size):
        size = min(p.group_size, n - first)
        for chunk in range(p.chunks):
            order += [chunk] * size
    return order


def held(p: Pipeline, stage: int, n: int) -> frozenset[tuple[int, ...]]:
    """The in-flight micro-batches per chunk right after each forward of one iteration."""
    order = chunk_order(p, n)
    first_backward = warmup(p, stage, n)
    counts = [0] * p.chunks
    states = set()
    for k, chunk in enumerate(order):
        counts[chunk] += 1
        states.add(tuple(counts))
        if k >= first_backward:  # steady state: the oldest backward follows each forward
            counts[p.chunks - 1 - order[k - first_backward]] -= 1
    return frozenset(states)


def most_in_flight(p: Pipeline, stage: int, n: int) -> int:
    """The most micro-batch forwards (of all chunks) a stage holds at once."""
    return max(sum(s) for s in held(p, stage, n))


def runs(p: Pipeline, n: int) -> bool:
    """Whether Megatron's schedule accepts `n` micro-batches (the interleaved schedule needs
    at least a group, and a last group of none or at least `stages` micro-batches)."""
    if n < 1:
        return False
    if not p.interleaved:
        return True
    rest = n % p.group_size
    return p.stages <= p.group_size <= n and (rest == 0 or rest >= p.stages)


def fewest_alike(p: Pipeline, n: int) -> int:
    """The fewest micro-batches per iteration (at most `n`) with which every stage goes through
    the same in-flight states as with `n`; `n` itself when none fewer does (or when `n` does
    not run: Megatron's own error is the answer)."""
    if not runs(p, n):
        return n
    if not p.interleaved:  # states 1 .. min(PP - r, N) on stage r
        return min(n, p.stages)
    # The last group's size shapes the end of the schedule: keep it.
    rest = n % p.group_size
    wanted = [held(p, stage, n) for stage in range(p.stages)]
    for m in range(rest or p.group_size, n, p.group_size):
        if runs(p, m) and all(held(p, stage, m) == want for stage, want in enumerate(wanted)):
            return m
    return n
