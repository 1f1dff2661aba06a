"""Group operations a fake process group refuses (part of patches/torch_distributed.py's set,
applied and undone with it).

- `split_group` (and DeviceMesh, which calls it when the default group is bound to a device:
  `init_process_group(device_id=...)`, as Lightning does) asks the parent's backend to split
  its communicator; the fake backend cannot ("No backend for the parent process group or its
  backend does not support splitting"). The rank's own split is made as a new group of the
  same global ranks, as NCCL's split makes it: one group, of the split this rank is in, or
  None when it is in none.
- `monitored_barrier` is Gloo's; the fake backend refuses it ("Backend fake does not support
  monitoredBarrier"). On a group the script made with Gloo (or `cpu:gloo,cuda:nccl`) it is a
  barrier, which no simulated rank waits at; on an NCCL group torch's own `ValueError` stands,
  as on the GPU.
- `register_mem_pool` / `deregister_mem_pool` are ProcessGroupNCCL's (NCCL user-buffer
  registration of a `torch.cuda.MemPool`'s segments: Megatron's `--use-nccl-ub`); the fake
  backend has neither (an AttributeError). Registering maps memory NCCL already holds: nothing
  to allocate, so both do nothing.
"""

from __future__ import annotations

import functools

from .patcher import Patcher


def apply(patcher: Patcher, layout, bound_in) -> None:
    """`layout`: the recorder that knows the backend the script asked for;
    `bound_in(name, original, first)`: the modules that bound an original."""
    _split_group(patcher, bound_in)
    _monitored_barrier(patcher, layout, bound_in)
    _mem_pool_registration(patcher)


def _mem_pool_registration(patcher: Patcher) -> None:
    from torch._C._distributed_c10d import FakeProcessGroup

    def register_mem_pool(self, pool, symm: bool = False) -> None:
        return None

    def deregister_mem_pool(self, pool) -> None:
        return None

    for name, value in (("register_mem_pool", register_mem_pool),
                        ("deregister_mem_pool", deregister_mem_pool)):
        if not hasattr(FakeProcessGroup, name):
            patcher.setattr(FakeProcessGroup, name, value)


def _split_group(patcher: Patcher, bound_in) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.split_group

    @functools.wraps(original)
    def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None,
                    group_desc=None, backend=None):
        if not split_ranks:
            raise ValueError("split_ranks cannot be None or empty")
        parent = parent_pg or c10d._get_default_group()
        if parent not in c10d._world.pg_group_ranks:
            raise ValueError(f"Group {parent} is not registered")
        to_global = {group_rank: global_rank for global_rank, group_rank
                     in c10d._world.pg_group_ranks[parent].items()}
        me = parent.rank()
        for ranks in split_ranks:
            if len(ranks) != len(set(ranks)):
                raise ValueError("the split group cannot have duplicate ranks")
            if me in ranks:
                return dist.new_group([to_global[r] for r in sorted(ranks)], timeout=timeout,
                                      group_desc=group_desc)
        return None

    patcher.set_everywhere(bound_in("split_group", original, [c10d, dist]), "split_group",
                           split_group)


def _monitored_barrier(patcher: Patcher, layout, bound_in) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch._C._distributed_c10d import ProcessGroup

    from .torch_distributed_bringup import requested_backend

    def gloo(group) -> bool:
        return "gloo" in requested_backend(layout, group)

    original = c10d.monitored_barrier

    @functools.wraps(original)
    def monitored_barrier(group=c10d.GroupMember.WORLD, timeout=None,
                          wait_all_ranks: bool = False):
        if c10d._rank_not_in_group(group):
            return None
        if not gloo(group):
            raise ValueError("monitored_barrier is only implemented for GLOO backend.")
        return dist.barrier(group)

    def group_monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        # Lightning's _InfiniteBarrier: a new_group(backend="gloo") and its method.
        if not gloo(self):
            raise RuntimeError(f"Backend {requested_backend(layout, self)} does not support "
                               "monitoredBarrier, only GLOO supports monitored barrier.")
        dist.barrier(self)

    patcher.set_everywhere(bound_in("monitored_barrier", original, [c10d, dist]),
                           "monitored_barrier", monitored_barrier)
    patcher.setattr(ProcessGroup, "monitored_barrier", group_monitored_barrier)
