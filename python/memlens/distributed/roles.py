"""Which ranks of a job are alike, so that tracing one of them answers for all.

The rule, applied to what rank 0 built (its `meta.parallel`, see layout.py): two ranks are
alike when, in every family of process groups that the job used,
- of a *positional* use (pipeline stages, tensor parallelism, all-to-all, point-to-point),
  they have the same coordinate: what such a rank holds is chosen by its position;
- of data parallelism only (FSDP, DDP), FSDP gives them chunks of equal length for every
  parameter length it shards (ranks past the end of an uneven split get shorter or empty
  chunks; DDP and FSDP1, whose flat parameters are padded, give every rank the same);
- they are both members or both outside it (a group that covers some ranks only).
A family that a library declared symmetric (Megatron's TP, DP, CP, EP: it checks that they
divide evenly) never separates ranks, whatever collectives run over it.
Families nobody used (a mesh dimension made but never used) do not separate ranks. Each group
of alike ranks is traced once, by its lowest rank (or the last rank of the job, traced beside
rank 0: parallel_runs.py); rank 0 represents its own group, and since
scripts tend to do extra work on rank 0 (logging, checkpoints), it is the group's worst case.

What this cannot see: a script that branches on its rank outside any parallel structure
(`if rank == 3: ...`). Use `--rank R` to trace such a rank on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import DATA_PARALLEL, POSITIONAL, SYMMETRIC, TENSOR_PARALLEL, Family


@dataclass
class RankGroup:
    representative: int
    ranks: list[int]


def chunk_length(length: int, parts: int, index: int) -> int:
    """Length of chunk `index` when `torch.chunk` splits `length` into `parts` (FSDP's rule)."""
    size = -(-length // parts) if parts else length
    return max(0, min(size, length - index * size))


def _signature(fam: Family, rank: int) -> tuple:
    group = next((g for g in fam.groups if rank in g), None)
    if group is None:
        return ("outside",)
    coordinate = group.index(rank)
    if SYMMETRIC in fam.uses:  # declared by a library that splits evenly (Megatron)
        return ()
    if fam.uses & set(POSITIONAL) or TENSOR_PARALLEL in fam.uses:
        return ("at", coordinate)
    if DATA_PARALLEL in fam.uses and fam.shards:
        return tuple(chunk_length(n, len(group), coordinate) for n in fam.shards)
    return ()


def group_ranks(parallel: dict, world_size: int) -> list[RankGroup]:
    """Groups of alike ranks, by lowest rank, from rank 0's `meta.parallel`."""
    families = [Family.from_json(f) for f in parallel.get("families", []) if f.get("uses")]
    groups: dict[tuple, RankGroup] = {}
    for rank in range(world_size):
        key = tuple(_signature(f, rank) for f in families)
        if key in groups:
            groups[key].ranks.append(rank)
        else:
            groups[key] = RankGroup(rank, [rank])
    return sorted(groups.values(), key=lambda g: g.representative)


def compact(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 5, 7, 8] -> "0-3,5,7-8"."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ",".join(parts)
