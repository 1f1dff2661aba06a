"""Patches of torch.distributed that let one process be rank R of a job of W processes.

Applied by the Tracer only when a world size is given, undone when the trace ends.

- Every process group is a fake one (`torch.testing._internal.distributed.fake_pg`): whatever
  backend, init method or store the script uses, `init_process_group` (or `init_device_mesh`
  without it) makes a fake default group of the simulated world size and rank, with no
  rendezvous and no socket, and `new_group`/DeviceMesh sub-groups are fake too
  (torch_distributed_bringup.py); the store answers the whole Store API
  (torch_distributed_store.py); `split_group` and `monitored_barrier`, which the fake backend
  refuses, work (torch_distributed_groups.py). Collectives then run their fake kernels: outputs are
  allocated (the ledger books them as any op output) and no data moves.
- DeviceMesh is bookkeeping built from small integer CPU tensors (`arange(world)`, reshaped and
  read back with `.tolist()`): under FakeTensorMode those would be fake and unreadable. Its
  methods run with every dispatch mode suspended, so they are real CPU tensors, as in a real
  job, and never part of device memory.
- Object collectives (`broadcast_object_list`, `all_gather_object`, ...) pickle objects into
  byte tensors and read them back: under fake mode there are no bytes. They answer as if every
  rank held this rank's objects.
- What the rank builds (meshes, groups; FSDP/DDP/TP/pipeline users of each group, in
  torch_distributed_users.py) is reported to the `layout` recorder
  (memlens/distributed/layout.py) for the snapshot and rank grouping.
- Where a runtime reads values that another rank would have sent (DDP's checks and bucket
  order, the pipeline schedule's vote, DTensor's index bookkeeping), the simulated rank answers
  as every rank of the same script would, each patch saying why. docs/distributed.md lists them.
"""

from __future__ import annotations

import copy
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import torch

from . import (torch_distributed_bringup, torch_distributed_groups, torch_distributed_users,
               torch_object_p2p)
from .inline_pool import InlineThreadPoolExecutor
from .patcher import Patcher, check_tested



def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _real(fn: Callable) -> Callable:
    """`fn` run with every dispatch mode (FakeTensorMode, the accountant) suspended."""
    from torch.utils._python_dispatch import _disable_current_modes

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _disable_current_modes():
            return fn(*args, **kwargs)

    return wrapper


def apply(patcher: Patcher, spec, layout, is_gradient: Callable[[torch.Tensor], None],
          dispatch_mode: type, works=None, state_init_step=None, note_value=None) -> None:
    """`spec`: the simulated RankSpec; `layout`: the recorder of what the rank builds;
    `is_gradient(t)`: t's storage holds gradients (DDP's buckets); `dispatch_mode`: the
    accountant's TorchDispatchMode class (the engine's, handed in: patches import no engine);
    `works`: the model of NCCL's streams and works (kernels/nccl_work.py), told of waits;
    `state_init_step()`: a context in which an optimizer step ends no iteration;
    `note_value(what, value, depth)`: a value the trace made up, where the caller read it."""
    import torch.distributed as dist

    check_tested("torch_distributed", torch.__version__)
    if not dist.is_available():
        from ..errors import MemlensError

        raise MemlensError("this torch build has no torch.distributed; cannot simulate a rank")
    torch_distributed_bringup.apply(patcher, spec, layout)
    torch_distributed_groups.apply(patcher, layout, torch_distributed_bringup._bound_in)
    _device_mesh(patcher, layout)
    _object_collectives(patcher, spec, note_value)
    _cross_rank_checks(patcher)
    _checkpoints(patcher, state_init_step)
    _coalesced_collectives(patcher)
    _dtensor(patcher, dispatch_mode)
    _fsdp2_copy_in(patcher)
    _collective_results(patcher)
    if works is not None:
        _work_waits(patcher, works)
    torch_object_p2p.apply(patcher, spec)  # objects another rank sends
    torch_distributed_users.apply(patcher, layout, is_gradient)


# -- process groups ----------------------------------------------------------------------
def destroy_if_initialized() -> None:
    """The script left its process group alive: destroy it, as process exit would."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# -- DeviceMesh ------------------------------------------------------------------------------
def _device_mesh(patcher: Patcher, layout) -> None:
    import torch.distributed.device_mesh as dm

    cls = dm.DeviceMesh
    for name, value in list(vars(cls).items()):
        if isinstance(value, property):
            patcher.setattr(cls, name, property(_real(value.fget)))
        elif isinstance(value, staticmethod):
            patcher.setattr(cls, name, staticmethod(_real(value.__func__)))
        elif isinstance(value, classmethod):
            patcher.setattr(cls, name, classmethod(_real(value.__func__)))
        elif callable(value) and not isinstance(value, type) and name != "__init__":
            patcher.setattr(cls, name, _real(value))
    original_init = cls.__init__

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        layout.mesh_created(self)

    patcher.setattr(cls, "__init__", _real(__init__))
    patcher.setattr(dm, "init_device_mesh", _real(dm.init_device_mesh))
    import torch.distributed as dist

    if getattr(dist, "init_device_mesh", None) is not None:
        patcher.setattr(dist, "init_device_mesh", dm.init_device_mesh)


# -- checks across ranks ---------------------------------------------------------------------
def _cross_rank_checks(patcher: Patcher) -> None:
    """DDP compares parameter shapes across ranks in C++, reading the values of a tensor it
    builds from them: with one simulated rank there is nothing to compare against."""
    import torch.distributed.utils as du
    import torch.nn.parallel.distributed as ddp

    patcher.setattr(du, "_verify_param_shape_across_processes", _noop)
    if hasattr(ddp, "_verify_param_shape_across_processes"):
        patcher.setattr(ddp, "_verify_param_shape_across_processes", _noop)


def _checkpoints(patcher: Patcher, state_init_step=None) -> None:
    """`torch.distributed.checkpoint.save` gathers every rank's save plan on the coordinator
    and checks that the chunks cover each tensor (OLMo-core saves a sharded checkpoint at step
    0). The object collectives hand the coordinator this rank's plan for every rank, so an
    FSDP-sharded tensor looks a quarter covered on 4 ranks ("Failed to validate global plan:
    invalid fill"): the check of chunks other ranks send is skipped; nothing on the device
    depends on it. `async_save` stages the state dict and writes it from a worker thread: the
    writes run in the traced thread instead (inline_pool.py), the staging as before.
    `get_optimizer_state_dict` of a fresh optimizer creates its state with a step of zero
    gradients and lr 0 (`_init_optim_state`): inside `state_init_step()`, no iteration."""
    try:
        import torch.distributed.checkpoint._async_thread_executor as async_executor
        import torch.distributed.checkpoint.default_planner as planner
        import torch.distributed.checkpoint.state_dict as state_dict
    except ImportError:  # a build without torch.distributed.checkpoint
        return
    init_state = getattr(state_dict, "_init_optim_state", None)
    if init_state is not None and state_init_step is not None:
        @functools.wraps(init_state)
        def _init_optim_state(optim) -> None:
            with state_init_step():
                return init_state(optim)

        patcher.setattr(state_dict, "_init_optim_state", _init_optim_state)
    if hasattr(planner, "_validate_global_plan"):
        patcher.setattr(planner, "_validate_global_plan", lambda global_plan, metadata: [])
    if getattr(async_executor, "ThreadPoolExecutor", None) is ThreadPoolExecutor:
        patcher.setattr(async_executor, "ThreadPoolExecutor", InlineThreadPoolExecutor)


# -- coalesced collectives ------------------------------------------------------------------
def _coalesced_collectives(patcher: Patcher) -> None:
    """Collectives issued inside `_coalescing_manager` (Megatron's gradient sync does so) end in
    one `c10d::allreduce_coalesced_` (and kin), ops torch leaves without a fake kernel. Like
    the single-tensor ones, they work in place: the fake kernel only hands back a work."""
    from torch.distributed._meta_registrations import create_fakework

    lib = torch.library.Library("c10d", "IMPL")
    for op in ("allreduce_coalesced_", "allgather_coalesced_",
               "allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_"):
        try:
            lib.impl(op, lambda *args: create_fakework(args, return_first_arg=False), "Meta")
        except RuntimeError:  # registered already (a later torch), or absent
            pass
    patcher.defer(lib._destroy)


# -- DTensor ---------------------------------------------------------------------------------
def _dtensor(patcher: Patcher, dispatch_mode: type) -> None:
    """DTensor derives an op's output metadata by running the op on fake tensors of the
    *global* shape, inside the fake mode it detects — ours, where the accountant would book
    global-sized phantoms. In a real job no fake mode is found and the probe costs no memory:
    run it with our modes suspended, so a fresh FakeTensorMode of its own does the same."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    patcher.setattr(ShardingPropagator, "_propagate_tensor_meta_non_cached",
                    _real(ShardingPropagator._propagate_tensor_meta_non_cached))
    # Strided shards (FSDP over TP) find their chunk sizes and offsets by splitting an arange
    # of indices and reading it back: bookkeeping on small CPU tensors, real in a real job.
    from torch.distributed.tensor import placement_types as pt

    strided = getattr(pt, "_StridedShard", None)
    if strided is not None and "local_shard_size_and_offset" in vars(strided):
        patcher.setattr(strided, "local_shard_size_and_offset",
                        _real(vars(strided)["local_shard_size_and_offset"]))
    _dtensor_random_ops(patcher, dispatch_mode)


def _dtensor_random_ops(patcher: Patcher, accountant: type) -> None:
    """DTensor runs a random op on a CUDA shard (`nn.init.normal_`, `dropout`) through the
    higher-order operator `run_dtensor_rng_op`, which moves the CUDA generator's offset so that
    each shard draws its own part of the global stream; under a fake mode it always does (it
    takes that for compiling). A higher-order operator needs a rule for each dispatch mode it
    meets: the accountant's runs the op in the accountant, so its outputs are booked. The
    generator's offset, a value, is left alone.

    The RNG tracker that DTensor's factories (`torch.distributed.tensor.randn`) make
    broadcasts rank 0's generator state and compares it with the rank's own, element by
    element: values another rank sends. Every rank of the same script seeds alike, so the
    tracker is made without that synchronisation, as DTensor makes it while tracing."""
    from torch._prims import rng_prims
    from torch.distributed.tensor import _random


    tracker = _random.OffsetBasedRNGTracker
    original_init = tracker.__init__

    @functools.wraps(original_init)
    def __init__(self, device_mesh, run_state_sync: bool = True):
        original_init(self, device_mesh, run_state_sync=False)

    patcher.setattr(tracker, "__init__", __init__)
    # The tracker DTensor keeps in a module global dies with the trace's meshes.
    patcher.setattr(_random, "_rng_tracker", _random._rng_tracker)

    hop = getattr(rng_prims, "run_dtensor_rng_op", None)
    if hop is None:
        return

    def in_accountant(mode, start_offset_incr, end_offset_incr, op, *args, **kwargs):
        with mode:
            return op(*args, **kwargs)

    patcher.hop_rule(hop, accountant, in_accountant)


def _fsdp2_copy_in(patcher: Patcher) -> None:
    """FSDP2 copies each parameter's shard into the all-gather buffer with its own op,
    `fsdp::all_gather_copy_in(inputs, output, ...)`. On a GPU the dispatcher runs its CUDA
    kernel whenever the output is a CUDA tensor, and that kernel's `_foreach_copy_` takes
    shards from any device: shards held in host memory (litgpt's LoRA loads its frozen base
    weights with `cpu_offload=True`) are copied host to device. FakeTensorMode runs the op's
    Meta kernel only after checking that all its tensors share one device, and refused them.
    A fake kernel of the op (which FakeTensorMode runs instead, without that check) runs the
    CUDA kernel's own body: a view of the output, then the copies. torch refuses to register
    one beside a Meta kernel, so it is put in torch's registry directly, and taken out after."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_collectives
    except ImportError:
        return
    kernel_body = getattr(_fsdp_collectives, "all_gather_copy_in_cuda", None)
    if kernel_body is None:
        return
    from torch._library.simple_registry import singleton
    from torch._library.utils import Kernel

    holder = singleton.find("fsdp::all_gather_copy_in").fake_impl
    kernel = Kernel(kernel_body, "memlens: FSDP2's CUDA kernel, run on fake tensors")
    holder.kernels.append(kernel)
    patcher.defer(lambda: holder.kernels.remove(kernel) if kernel in holder.kernels else None)


# -- object collectives ----------------------------------------------------------------------
def _object_collectives(patcher: Patcher, spec, note_value=None) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def group_size(group) -> int:
        return dist.get_world_size(group)

    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        # Every rank keeps what it has: this rank's objects. A receiver's placeholders (None,
        # where only the sender computed the objects: FSDP's optimizer-state keys) stay None:
        # the sender's objects are not known in a trace of this rank. Noted where it was read,
        # so that a failure that follows says why.
        sender = group_src if src is None and group_src is not None else src
        me = dist.get_rank(group) if src is None and group_src is not None else dist.get_rank()
        if note_value is not None and sender is not None and sender != me and \
                any(o is None for o in object_list):
            note_value(f"objects broadcast by rank {sender}", None)
        return None

    def all_gather_object(object_list, obj, group=None):
        for i in range(group_size(group)):
            object_list[i] = copy.deepcopy(obj) if i else obj

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
        if object_gather_list is not None:
            for i in range(len(object_gather_list)):
                object_gather_list[i] = obj

    def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None,
                            src=None, group=None, group_src=None):
        if scatter_object_input_list:
            scatter_object_output_list[0] = scatter_object_input_list[0]

    for name, fn in (("broadcast_object_list", broadcast_object_list),
                     ("all_gather_object", all_gather_object), ("gather_object", gather_object),
                     ("scatter_object_list", scatter_object_list)):
        patcher.setattr(c10d, name, fn)
        patcher.setattr(dist, name, fn)


# -- collective results ----------------------------------------------------------------------
def _collective_results(patcher: Patcher) -> None:
    """An async all-reduce's future holds its tensor, as NCCL's does (DDP's compression hooks
    chain `get_future().then(...)`; the fake group's future holds nothing)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.all_reduce

    @functools.wraps(original)
    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = original(tensor, op, group, async_op)
        return _done_work([tensor], work) if async_op and work is not None else work

    for owner in (c10d, dist):
        patcher.setattr(owner, "all_reduce", all_reduce)


_DONE_WORK = None


def _done_work(tensors, work):
    """A finished dist.Work whose future holds `tensors`; waiting for it waits for `work`,
    the fake group's (the class is made on first use: torch.distributed is imported only when
    a rank is simulated)."""
    global _DONE_WORK
    if _DONE_WORK is None:
        import torch.distributed as dist

        class DoneWork(dist.Work):
            def __init__(self, tensors, work) -> None:
                super().__init__()
                self._future = torch.futures.Future()
                self._future.set_result(tensors)
                self._work = work

            def wait(self, timeout=None) -> bool:
                self._work.wait()
                return True

            def synchronize(self) -> None:
                self._work.wait()

            def is_completed(self) -> bool:
                return True

            def get_future(self):
                return self._future

        _DONE_WORK = DoneWork
    return _DONE_WORK(tensors, work)


# -- waits on works --------------------------------------------------------------------------
def _work_waits(patcher: Patcher, works) -> None:
    """`work.wait()` on a fake group's work does nothing; on ProcessGroupNCCL's it makes the
    current stream wait for the NCCL stream and lets go of the tensors the work stashed: the
    model is told (FakeWork is the C++ work every fake collective returns; its pybind class
    takes Python methods). batch_isend_irecv's ops share its works' waits."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch._C._distributed_c10d import FakeWork

    for name in ("wait", "synchronize"):
        original = getattr(FakeWork, name)

        def waiting(self, *args, _original=original, **kwargs):
            works.waited(int(self.seq_id))
            return _original(self, *args, **kwargs)

        patcher.setattr(FakeWork, name, waiting)
    batch = c10d.batch_isend_irecv

    @functools.wraps(batch)
    def batch_isend_irecv(*args, **kwargs):
        with works.batched() as issued:
            result = batch(*args, **kwargs)
        works.batch_returned(result, issued)
        return result

    for owner in (c10d, dist):
        if getattr(owner, "batch_isend_irecv", None) is batch:
            patcher.setattr(owner, "batch_isend_irecv", batch_isend_irecv)
