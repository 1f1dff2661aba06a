"""Bringing up torch.distributed for a simulated rank (part of patches/torch_distributed.py's
set, applied and undone with it), as training scripts do it, without any rendezvous: nothing
ever opens a socket, waits for other ranks or reads a store they would write.

- `init_process_group`, with whatever backend (`nccl`, `gloo`, "cpu:gloo,cuda:nccl"),
  `init_method` (`env://`, `tcp://`, `file://`), `store`, world size and rank the script
  passes, makes a fake default group of the simulated world size and rank. It is replaced in
  every module that bound it, DeviceMesh's among them: `init_device_mesh` without a prior
  `init_process_group` calls its own copy (and would otherwise wait up to 30 minutes for the
  other ranks on a real TCPStore). Sub-groups (`new_group`, DeviceMesh's) are fake too.
- The default group's store, and `TCPStore`, which connects (or listens) when it is built,
  are an in-process store that answers the whole Store API as a simulated rank's job would
  (torch_distributed_store.py).
- NCCL, as a GPU build reports it: `is_nccl_available()` answers True, so scripts choose
  `nccl`; on a build without NCCL, torch's own code then tests `isinstance(pg,
  ProcessGroupNCCL)` on a name its module never defined (the NameError of `_set_pg_timeout`),
  so a stand-in class is defined there. No group is ever one: `isinstance` answers False, as
  it does for the fake group on a GPU build. Scripts that configure NCCL
  (`ProcessGroupNCCL.Options()`) get an options object that keeps what they set.
- `get_backend()` answers the script what it asked for (`nccl`, not `fake`; with no backend
  named, torch's default for the `device_id`, or `undefined` as torch says), so `if dist.get_backend() == "nccl"` takes
  the GPU job's branch. torch's own callers keep seeing the fake group's `fake` backend, which
  is what their collectives run on.
- `_set_pg_timeout` (torchtitan sets a shorter timeout after its first step): a fake group
  never waits, so there is nothing to set (torch would warn that only NCCL and Gloo groups
  take a timeout, about a group the script made with `nccl`).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from . import torch_distributed_store
from .patcher import Patcher


def apply(patcher: Patcher, spec, layout) -> None:
    """`spec`: the simulated RankSpec; `layout`: the recorder of the groups the rank builds."""
    _init_process_group(patcher, spec, layout)
    _get_backend(patcher, layout)
    torch_distributed_store.apply(patcher, _bound_in)
    _nccl(patcher)


def _bound_in(name: str, original: Any, first: list) -> list:
    """`first` and every loaded module that bound `original` under `name` (`from
    torch.distributed.distributed_c10d import init_process_group` copies it into a module)."""
    modules = list(first)
    for mod in list(sys.modules.values()):
        if mod is not None and mod not in modules and \
                getattr(mod, "__dict__", {}).get(name) is original:
            modules.append(mod)
    return modules


def _init_process_group(patcher: Patcher, spec, layout) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 (registers "fake")

    original_init = c10d.init_process_group
    original_helper = c10d._new_process_group_helper

    @functools.wraps(original_init)
    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                           store=None, group_name="", pg_options=None, device_id=None, **kw):
        if backend is None and device_id is not None:  # torch names it from the device
            backend = c10d.Backend.default_device_backend_map.get(torch.device(device_id).type)
        layout.requested_backend = str(backend) if backend is not None else None
        # No rendezvous: the simulated rank and world size, whatever the script passes.
        return original_init("fake", timeout=timeout, world_size=spec.world_size,
                             rank=spec.rank, store=torch_distributed_store.simulated_store(),
                             group_name=group_name, device_id=device_id, **kw)

    def new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store,
                                 group_name, backend_options=None, *args, **kwargs):
        if str(backend) != "fake":  # a new_group(backend=...) of the script's
            layout.group_backends[str(group_name)] = str(backend)
        pg = original_helper(group_size, group_rank, global_ranks_in_group, "fake", store,
                             group_name, None, *args, **kwargs)
        ranks = list(global_ranks_in_group) or list(range(spec.world_size))
        layout.group_created(pg[0] if isinstance(pg, tuple) else pg, ranks)
        return pg

    patcher.set_everywhere(_bound_in("init_process_group", original_init, [c10d, dist]),
                           "init_process_group", init_process_group)
    patcher.setattr(c10d, "_new_process_group_helper", new_process_group_helper)
    for owner in (dist, c10d):
        patcher.setattr(owner, "is_torchelastic_launched", lambda: True)


def _get_backend(patcher: Patcher, layout) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.get_backend

    @functools.wraps(original)
    def get_backend(group=None):
        backend = original(group)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if backend != "fake" or caller == "torch" or caller.startswith("torch."):
            return backend
        return c10d.Backend(requested_backend(layout, group))

    patcher.set_everywhere(_bound_in("get_backend", original, [c10d, dist]), "get_backend",
                           get_backend)
    _default_device(patcher, layout)


_BACKEND_DEVICES = {"nccl": "cuda", "gloo": "cpu", "mpi": "cpu", "xccl": "xpu", "hccl": "hpu"}


def _default_device(patcher: Patcher, layout) -> None:
    """`_get_pg_default_device(group)`: the device of the backend the script asked for. The
    fake backend is registered for cpu, cuda, hpu and xpu, for which torch answers "cpu"; an
    NCCL group's is "cuda". torch.distributed.checkpoint's `set_model_state_dict(...,
    broadcast_from_rank0=True)` of a model still on the meta device (Lightning Fabric's
    `load_raw`, litgpt's LoRA on FSDP2) broadcasts onto that device, and assigned the shards
    to the CPU."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    original = getattr(c10d, "_get_pg_default_device", None)
    if original is None:
        return

    @functools.wraps(original)
    def _get_pg_default_device(group=None):
        asked = requested_backend(layout, group or c10d._get_default_group()).lower()
        devices = [part.split(":")[0] if ":" in part else _BACKEND_DEVICES.get(part)
                   for part in asked.split(",")]
        if not devices or None in devices:  # "undefined", a third-party backend
            return original(group)
        return torch.device("cpu" if "cpu" in devices else devices[0])  # torch's rule

    patcher.set_everywhere(_bound_in("_get_pg_default_device", original, [c10d]),
                           "_get_pg_default_device", _get_pg_default_device)


def requested_backend(layout, group=None) -> str:
    """The backend the script asked for `group` (None: the default group), whatever the fake
    group runs on. torch's name for a group made with no backend and no device: "undefined"."""
    named = layout.group_backends.get(str(group.group_name)) if group is not None else None
    return named or layout.requested_backend or "undefined"


class _NCCLOptions:
    """`ProcessGroupNCCL.Options` on a build without NCCL: keeps what the script sets."""

    def __init__(self, is_high_priority_stream: bool = False) -> None:
        self.is_high_priority_stream = is_high_priority_stream


class _ProcessGroupNCCL:
    """The name `ProcessGroupNCCL` on a build without NCCL. No group is one (the simulated
    rank's groups are fake), and none can be made."""

    Options = _NCCLOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from ..errors import MemlensError

        raise MemlensError("ProcessGroupNCCL cannot be built by a simulated rank; "
                           "use dist.init_process_group('nccl') or dist.new_group()")


def _nccl(patcher: Patcher) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    # Module globals: torch's own code asks c10d's is_nccl_available() too.
    patcher.set_everywhere(_bound_in("is_nccl_available", c10d.is_nccl_available, [c10d, dist]),
                           "is_nccl_available", lambda: True)
    if hasattr(c10d, "_set_pg_timeout"):
        patcher.setattr(c10d, "_set_pg_timeout", lambda timeout, group=None: None)
    if getattr(c10d, "ProcessGroupNCCL", None) is None:
        stand_in = type("ProcessGroupNCCL", (_ProcessGroupNCCL,),
                        {"__module__": "torch.distributed.distributed_c10d"})
        for owner in (dist, c10d):
            patcher.setattr(owner, "ProcessGroupNCCL", stand_in)
