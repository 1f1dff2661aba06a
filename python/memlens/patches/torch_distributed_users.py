"""Patches of torch.distributed's parallelisms for a simulated rank (part of
patches/torch_distributed.py's set, applied and undone with it): FSDP2, FSDP1, DDP, tensor
parallelism, pipelining and the collectives that hand-written expert or pipeline parallelism
use report which groups or meshes they use to the `layout` recorder (the rank grouping of
`--ranks all` reads it), and their runtimes are made to work on a fake group.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from .patcher import Patcher


# -- who uses which group --------------------------------------------------------------------
def apply(patcher: Patcher, layout, is_gradient) -> None:
    """Report the parallelisms a rank applies, with the groups or meshes they use, and make
    their runtimes work with a fake group."""
    from ..distributed import layout as L

    _fsdp2(patcher, layout, L)
    _fsdp1(patcher, layout, L)
    _ddp(patcher, layout, L, is_gradient)
    _tensor_parallel(patcher, layout, L)
    _pipelining(patcher, layout, L)
    _collective_users(patcher, layout, L)


def _after_init(patcher: Patcher, cls, record: Callable) -> None:
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        record(self)

    patcher.setattr(cls, "__init__", __init__)


def _fsdp2(patcher: Patcher, layout, L) -> None:
    """fully_shard: each parameter is chunked along one dim over the shard group (the chunk
    lengths are what can differ between ranks); HSDP also replicates over a second group."""
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

    original = FSDPParam._init_sharded_param

    @functools.wraps(original)
    def _init_sharded_param(self, param, device, shard_placement_fn, mesh_info):
        original(self, param, device, shard_placement_fn, mesh_info)
        local = getattr(param, "_local_tensor", param)  # a TP-sharded parameter: its TP shard
        info = self.mesh_info
        shard_group = getattr(info, "shard_process_group", None)
        if shard_group is not None:
            layout.use(shard_group, L.DATA_PARALLEL, [int(local.size(self.fsdp_placement.dim))])
        replicate_group = getattr(info, "replicate_process_group", None)
        if replicate_group is not None:
            layout.use(replicate_group, L.DATA_PARALLEL)

    patcher.setattr(FSDPParam, "_init_sharded_param", _init_sharded_param)
    _fsdp2_moves_fake_states(patcher)


def _fsdp2_moves_fake_states(patcher: Patcher) -> None:
    """fully_shard moves a module's CPU parameters and buffers to the mesh's device with
    `tensor.data = tensor.to(device)`, which leaves a fake tensor's device (a Python attribute)
    on the CPU; its next check then refuses the parameter ("Expects the parameter to already be
    moved to device cuda:N but got cpu"). accelerate's FSDP2 prepares a model built on the CPU
    that way. Here a fake tensor is moved first, its device with it."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed.fsdp._fully_shard import _fsdp_init

    original = _fsdp_init._move_states_to_device

    @functools.wraps(original)
    def _move_states_to_device(params, buffers, device):
        for tensor in (*params, *buffers):
            if isinstance(tensor, FakeTensor) and tensor.device != device and \
                    tensor.device.type != "meta":
                moved = tensor.to(device)
                with torch.no_grad():
                    tensor.data = moved
                tensor.fake_device = moved.fake_device
        original(params, buffers, device)

    patcher.setattr(_fsdp_init, "_move_states_to_device", _move_states_to_device)


def _fsdp1(patcher: Patcher, layout, L) -> None:
    """FullyShardedDataParallel, whose flat parameters are padded to equal shards on every
    rank. It records its buffers' streams with dispatch turned off, straight into the CUDA
    kernel, which a build without CUDA lacks: recorded through dispatch instead, where the
    accountant tells the allocator model (the freed block waits for that stream)."""
    import torch.distributed.fsdp._common_utils as fsdp_common
    import torch.distributed.fsdp._flat_param as flat_param
    import torch.distributed.fsdp._runtime_utils as fsdp_runtime
    from torch.distributed.fsdp import FullyShardedDataParallel

    def record(m) -> None:
        for group in (getattr(m, "process_group", None), getattr(m, "_inter_node_pg", None)):
            if group is not None:
                layout.use(group, L.DATA_PARALLEL)

    _after_init(patcher, FullyShardedDataParallel, record)
    for owner in (fsdp_common, flat_param, fsdp_runtime):
        patcher.setattr(owner, "_no_dispatch_record_stream", _record_stream)
    _fsdp1_device_id_moves(patcher)


def _fsdp1_device_id_moves(patcher: Patcher) -> None:
    """FSDP1 given a `device_id` (Lightning's FSDPStrategy) moves a module still on the CPU by
    `param.data = param.to(device)`, which leaves a fake tensor's device, a Python attribute,
    on the CPU ("An FSDP-managed module unexpectedly has parameters on cpu"): it follows."""
    import torch.distributed.fsdp._init_utils as init_utils

    original = init_utils._move_states_to_device

    @functools.wraps(original)
    def _move_states_to_device(params, buffers, device_from_device_id):
        original(params, buffers, device_from_device_id)
        if device_from_device_id is None:
            return
        device = torch.device(device_from_device_id)
        if device.index is None and device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        for t in (*params, *buffers, *(p.grad for p in params if p.grad is not None)):
            if hasattr(t, "fake_device"):
                t.fake_device = device

    patcher.setattr(init_utils, "_move_states_to_device", _move_states_to_device)


def _record_stream(tensor, stream) -> None:
    if tensor.device.type == "cuda":  # FSDP1 calls it for CPU-offloaded tensors too
        tensor.record_stream(stream)


def _ddp(patcher: Patcher, layout, L, is_gradient) -> None:
    """DistributedDataParallel. After the first backward it rebuilds its buckets in the order
    gradients became ready, agreeing on that order across ranks by reading a broadcast tensor
    of indices: skipped (the buckets keep their first order; every gradient is in one bucket
    either way). Its C++ logger times the first iterations with a CUDA timer that a build
    without CUDA lacks (it asserts): statistics with no memory, skipped. On a CUDA build the
    reducer's own timer records CUDA events (a real driver call, "CUDA driver version is
    insufficient") from `prepare_for_forward`, whose only other work is counting iterations
    for those statistics (reducer.cpp, torch 2.13 and 2.14): skipped there, and with no
    iteration counted no backward records its time either."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def record(m) -> None:
        if getattr(m, "device_mesh", None) is not None:
            layout.use_mesh(m.device_mesh, L.DATA_PARALLEL)
        else:
            layout.use(m.process_group, L.DATA_PARALLEL)
        m._memlens_hook = slot = _HookSlot(m.process_group, is_gradient)
        dist._register_comm_hook(m.reducer, slot, _run_ddp_hook)

    _after_init(patcher, DistributedDataParallel, record)
    patcher.setattr(DistributedDataParallel, "register_comm_hook", _ddp_register_comm_hook)
    patcher.setattr(dist.Reducer, "_rebuild_buckets", lambda self: False)
    patcher.setattr(dist.Logger, "set_runtime_stats_and_log", lambda self: None)
    if torch.version.cuda is not None:
        patcher.setattr(dist.Reducer, "prepare_for_forward", lambda self: None)


class _HookSlot:
    """The communication hook DDP's C++ reducer calls: the fake group's work carries no result
    and the reducer's built-in all-reduce hook refuses it. This stands in for it (divide and
    all-reduce the bucket in place, as the built-in does) until the script registers its own
    hook, which the C++ reducer would accept only once."""

    def __init__(self, group, is_gradient) -> None:
        self.group = group
        self.is_gradient = is_gradient  # a bucket holds gradients, whatever made it
        self.hook = self.state = None


def _run_ddp_hook(slot: _HookSlot, bucket):
    import torch.distributed as dist

    buffer = bucket.buffer()
    slot.is_gradient(buffer)
    if slot.hook is not None:
        return slot.hook(slot.state, bucket)
    buffer.div_(slot.group.size())
    # The built-in hook's allreduce takes the default AllreduceOptions: asyncOp = true (on the
    # group's NCCL stream, the bucket stashed until the work completes).
    dist.all_reduce(buffer, group=slot.group, async_op=True)
    fut = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def _ddp_register_comm_hook(self, state, hook) -> None:
    self._check_comm_hook(hook)
    self._comm_hooks.append((hook, state))
    self._memlens_hook.hook, self._memlens_hook.state = hook, state


def _tensor_parallel(patcher: Patcher, layout, L) -> None:
    import torch.distributed.tensor.parallel as tp
    import torch.distributed.tensor.parallel.api as tp_api

    original = tp_api.parallelize_module

    @functools.wraps(original)
    def parallelize_module(module, device_mesh=None, parallelize_plan=None, **kwargs):
        out = original(module, device_mesh, parallelize_plan, **kwargs)
        if device_mesh is not None:
            layout.use_mesh(device_mesh, L.TENSOR_PARALLEL)
        return out

    patcher.setattr(tp_api, "parallelize_module", parallelize_module)
    patcher.setattr(tp, "parallelize_module", parallelize_module)


def _pipelining(patcher: Patcher, layout, L) -> None:
    """torch.distributed.pipelining: the stage a rank holds follows its pipeline coordinate.
    Before the first step the stages vote, over point-to-point messages, whether all of them
    know their input and output shapes (static) or must infer them at run time, and each reads
    the product of the votes back out of a tensor. Every rank runs the same script, so each
    simulated stage takes its own vote as the outcome. (Inferring shapes needs the other ranks'
    outputs: torch_object_p2p.py gets them.)"""
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.pipelining.stage import PipelineStage, _PipelineStageBase

    def record(stage) -> None:
        layout.stages.append(int(stage.stage_index))
        layout.use(stage.group, L.PIPELINE)

    _after_init(patcher, _PipelineStageBase, record)
    original = schedules._PipelineSchedule._warmup_p2p

    @functools.wraps(original)
    def _warmup_p2p(self, stages, has_backward, p2p_done):
        if not all(isinstance(stage, PipelineStage) for stage in stages):
            return original(self, stages, has_backward, p2p_done)
        for stage in stages:
            dynamic = InferenceMode.needs_dynamic(stage._user_meta, has_backward)
            stage._inference_mode = InferenceMode.DYNAMIC if dynamic else InferenceMode.STATIC
        return None

    patcher.setattr(schedules._PipelineSchedule, "_warmup_p2p", _warmup_p2p)


def _collective_users(patcher: Patcher, layout, L) -> None:
    """All-to-all (expert or context parallelism) and point-to-point (hand-written pipelines)
    name groups whose coordinate may decide what a rank holds."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc
    import torch.distributed.distributed_c10d as c10d

    def wrap(owners, name, what, group_of):
        original = getattr(owners[0], name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            layout.use(group_of(args, kwargs), what)
            return original(*args, **kwargs)

        for owner in owners:
            if getattr(owner, name, None) is original:
                patcher.setattr(owner, name, wrapper)

    def group_at(i):
        return lambda args, kwargs: kwargs.get("group", args[i] if len(args) > i else None)

    def p2p_group(args, kwargs):
        ops = args[0] if args else kwargs.get("p2p_op_list", [])
        return ops[0].group if ops else None

    def functional_group(args, kwargs):
        return _as_process_group(kwargs.get("group", args[3] if len(args) > 3 else None))

    for name, i in (("all_to_all_single", 4), ("all_to_all", 2)):
        wrap((c10d, dist), name, L.ALL_TO_ALL, group_at(i))
    for name, i in (("send", 2), ("recv", 2), ("isend", 2), ("irecv", 2)):
        wrap((c10d, dist), name, L.P2P, group_at(i))
    wrap((c10d, dist), "batch_isend_irecv", L.P2P, p2p_group)
    for name in ("all_to_all_single", "all_to_all_single_autograd"):
        wrap((fc,), name, L.ALL_TO_ALL, functional_group)


_UNKNOWN_GROUP = object()  # a group we cannot name: no family, nothing recorded


def _as_process_group(group):
    """Functional collectives take a group, a 1-D mesh, (mesh, dim) or a group name."""
    import torch.distributed.distributed_c10d as c10d

    if isinstance(group, tuple) and len(group) == 2:
        return group[0].get_group(group[1])
    if hasattr(group, "get_group"):
        return group.get_group() if group.ndim == 1 else _UNKNOWN_GROUP
    if isinstance(group, str):
        return c10d._resolve_process_group(group)
    return group
