"""What the simulated rank built: its device meshes, its process groups, and what used them.

Filled by the torch.distributed patches while the script runs; read afterwards for the
snapshot's `meta.parallel` and, on rank 0, for grouping the job's ranks (roles.py).

A *family* is a set of disjoint process groups of one kind: the groups along one dimension of a
device mesh, the default (world) group, or the groups a script makes with `new_group` in a
loop (every rank calls `new_group` for every group, so every rank sees the whole family). A
rank's *coordinate* in a family is its position inside its own group of that family.

Each family collects *uses*:
- `data_parallel`: FSDP (fully_shard, FullyShardedDataParallel) or DDP shard or replicate over
  it. Ranks along such a dimension build the same things, except where FSDP's chunking of a
  parameter's dim 0 gives some ranks a shorter chunk: those lengths are kept (`shards`).
- `tensor_parallel`: DTensor sharding by `parallelize_module`; chunk lengths are kept too.
- `pipeline`: a pipeline stage's group (the stage a rank holds depends on its coordinate).
- `all_to_all`, `p2p`: expert or context parallelism, hand-written pipelines: what a rank
  holds may depend on its coordinate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATA_PARALLEL = "data_parallel"
TENSOR_PARALLEL = "tensor_parallel"
PIPELINE = "pipeline"
ALL_TO_ALL = "all_to_all"
P2P = "p2p"
# A library that splits evenly over this dimension (Megatron's TP, DP, CP, EP): every coordinate
# holds the same sizes.
SYMMETRIC = "symmetric"
# Uses whose coordinate alone decides what a rank holds.
POSITIONAL = (PIPELINE, ALL_TO_ALL, P2P)


@dataclass
class Family:
    name: str  # mesh dim name, "world", or "groups of N"
    groups: list[list[int]]  # disjoint lists of global ranks
    uses: set[str] = field(default_factory=set)
    shards: list[int] = field(default_factory=list)  # dim lengths chunked over the family

    def coordinate(self, rank: int) -> int | None:
        for g in self.groups:
            if rank in g:
                return g.index(rank)
        return None

    @property
    def size(self) -> int:
        return max((len(g) for g in self.groups), default=1)

    def to_json(self) -> dict:
        return {"name": self.name, "groups": self.groups, "uses": sorted(self.uses),
                "shards": self.shards}

    @staticmethod
    def from_json(d: dict) -> "Family":
        return Family(str(d["name"]), [list(map(int, g)) for g in d["groups"]],
                      set(d.get("uses", ())), [int(n) for n in d.get("shards", ())])


class Layout:
    def __init__(self, world_size: int, rank: int):
        self.world_size = world_size
        self.rank = rank
        self.requested_backend: str | None = None
        self.group_backends: dict[str, str] = {}  # group name -> backend a new_group named
        self.meshes: list[dict] = []  # {shape, dim_names, coordinate}
        self.families: list[Family] = []
        self._by_group: dict[int, Family] = {}  # id(ProcessGroup) -> family
        self._pgs: list[Any] = []  # keep groups alive so their ids stay unique
        self._ranks: dict[int, tuple[int, ...]] = {}  # id(ProcessGroup) -> its global ranks
        self._pending: list[tuple[Any, list[int]]] = []  # new_group calls not yet in a family
        self.stages: list[int] = []  # pipeline stage indices this rank holds

    # -- process groups ----------------------------------------------------------------------
    def group_created(self, pg, ranks: list[int]) -> None:
        """Every `new_group` (and the default group) on every rank, member or not."""
        if len(ranks) == self.world_size and sorted(ranks) == list(range(self.world_size)):
            fam = self._family("world", [list(range(self.world_size))])
        else:
            fam = self._loop_family(ranks)
        if _is_group(pg):
            self._pgs.append(pg)
            self._by_group[id(pg)] = fam
            self._ranks[id(pg)] = tuple(sorted(ranks))

    def _family(self, name: str, groups: list[list[int]]) -> Family:
        for fam in self.families:
            if fam.groups == groups:
                return fam
        fam = Family(name, groups)
        self.families.append(fam)
        return fam

    def _loop_family(self, ranks: list[int]) -> Family:
        """Groups made one after another by new_group, disjoint and of one size, are one family
        (Megatron-style loops); a group that overlaps the last family starts a new one."""
        last = self.families[-1] if self.families else None
        if last is not None and last.name.startswith("groups of") and \
                len(ranks) == last.size and not any(set(ranks) & set(g) for g in last.groups):
            last.groups.append(list(ranks))
            return last
        fam = Family(f"groups of {len(ranks)}", [list(ranks)])
        self.families.append(fam)
        return fam

    def declare(self, name: str, groups: list[list[int]], use: str) -> Family:
        """A library that knows its layout (Megatron's parallel_state) names a family outright:
        its process groups with those ranks leave whatever family they were guessed into, so
        later uses of them land here."""
        groups = sorted(sorted(g) for g in groups)
        fam = next((f for f in self.families if f.name == name and f.groups == groups), None)
        if fam is None:
            fam = Family(name, groups)
            self.families.append(fam)
        fam.uses.add(use)
        members = {tuple(g) for g in groups}
        for key, ranks in self._ranks.items():
            if ranks in members:
                self._by_group[key] = fam
        return fam

    def family_of(self, group) -> Family | None:
        """The family of a ProcessGroup (None: the default group) or of a (mesh, dim) pair."""
        import torch.distributed as dist

        if group is None or group is dist.GroupMember.WORLD:
            group = dist.distributed_c10d._get_default_group()
        return self._by_group.get(id(group))

    # -- device meshes -----------------------------------------------------------------------
    def mesh_created(self, mesh) -> None:
        tensor = mesh.mesh  # real: DeviceMesh methods run outside fake mode
        names = list(mesh.mesh_dim_names or [f"dim{i}" for i in range(tensor.ndim)])
        entry = {"shape": list(tensor.shape), "dim_names": names,
                 "coordinate": list(mesh.get_coordinate() or [])}
        if entry not in self.meshes and getattr(mesh, "_root_mesh", None) is None:
            self.meshes.append(entry)  # sub-meshes (mesh["tp"]) are slices of a root mesh
        for dim, name in enumerate(names):
            groups = tensor.movedim(dim, -1).reshape(-1, tensor.shape[dim]).tolist()
            fam = self._family(name, sorted(groups))
            if fam.name.startswith(("groups of", "world")) and name:
                fam.name = name  # a mesh dimension names what new_group made
            try:
                self._by_group[id(mesh.get_group(dim))] = fam
                self._pgs.append(mesh.get_group(dim))
            except Exception:  # a mesh whose groups are not made (e.g. _init_backend=False)
                pass

    # -- uses ----------------------------------------------------------------------------------
    def use(self, group, what: str, shards: list[int] | None = None) -> None:
        fam = self.family_of(group)
        if fam is None:
            return
        fam.uses.add(what)
        if shards:  # only distinct lengths matter (roles.py), and a model has few
            fam.shards = sorted(set(fam.shards) | set(shards))

    def use_mesh(self, mesh, what: str, dims: list[int] | None = None,
                 shards: list[int] | None = None) -> None:
        for dim in (range(mesh.ndim) if dims is None else dims):
            self.use(mesh.get_group(dim), what, shards)

    # -- the snapshot's meta.parallel ----------------------------------------------------------
    def to_json(self) -> dict:
        used = [f for f in self.families if f.uses]
        return {
            "backend": self.requested_backend,
            "meshes": self.meshes,
            "families": [f.to_json() for f in self.families if f.uses or f.name != "world"],
            "coordinates": {f.name: f.coordinate(self.rank) for f in used},
            "stages": self.stages,
            "role": role_string(self.families, self.rank, self.stages),
        }


_SHORT = {DATA_PARALLEL: "dp", TENSOR_PARALLEL: "tp", PIPELINE: "pp", ALL_TO_ALL: "ep",
          P2P: "p2p"}


def short_name(fam: Family) -> str:
    """A mesh dimension's own name; otherwise what the family is used for (dp, tp, pp, ...)."""
    if fam.name != "world" and not fam.name.startswith("groups of"):
        return fam.name
    for use in (PIPELINE, TENSOR_PARALLEL, ALL_TO_ALL, P2P, DATA_PARALLEL):
        if use in fam.uses:
            return _SHORT[use]
    return fam.name


def role_string(families: list[Family], rank: int, stages: list[int]) -> str:
    """`pp 1/4 · tp 0/2 · dp 3/8`: this rank's coordinate in each family that was used."""
    parts = []
    for fam in families:
        if not fam.uses:
            continue
        c = fam.coordinate(rank)
        if c is not None:
            parts.append(f"{short_name(fam)} {c}/{fam.size}")
    positions = {f.coordinate(rank) for f in families if PIPELINE in f.uses}
    if stages and (len(stages) > 1 or stages[0] not in positions):  # interleaved: say which
        parts.append("stages " + ",".join(map(str, stages)))
    return " · ".join(parts) or "single group"


def _is_group(pg) -> bool:
    import torch.distributed as dist

    return pg is not None and pg is not dist.GroupMember.NON_GROUP_MEMBER
