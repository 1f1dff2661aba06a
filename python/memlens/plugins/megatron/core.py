"""Patches of megatron-core's own machinery for a trace (the plugin is __init__.py).

- Phases follow Megatron's structure: each call of a pipeline schedule (the function
  `get_forward_backward_func()` returns) is `forward_backward_iter_N`, each
  `MegatronOptimizer.step()` is `optimizer_step_iter_N` (grad copies, clipping and the
  parameter all-gather included); before the first schedule call is `setup_model_and_optimizer`.
- The CUDA RNG tracker keeps its states through `torch.cuda.get_rng_state`/`set_rng_state`
  (simulated) rather than `torch.cuda.default_generators`, and forks without comparing CPU
  generator states (values a trace does not have; the comparison only ever logs a warning).
- Categories: the DDP parameter buffer is parameter memory and the gradient buffer gradient
  memory (both held by the DDP wrapper: they are shared by all its parameters); the optimizer's
  fp32 main parameters are optimizer state, as Megatron counts them.

Each patch is `patch(plugin, module)`, called once the module is imported.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ... import categories as C
from ...patches.patcher import check_tested
from .layout import declare_layout, share_by_parameter

SCHEDULES = ("forward_backward_no_pipelining", "forward_backward_pipelining_with_interleaving",
             "forward_backward_pipelining_without_interleaving")

# (model parameters, their fp32 main copies) group lists of Megatron's mixed-precision
# optimizers: Float16OptimizerWithFloat16Params, DistributedOptimizer.
_MAIN_PARAM_GROUPS = (("float16_groups", "fp32_from_float16_groups"),
                      ("model_float16_groups", "shard_fp32_from_float16_groups"))


def check_version(plugin, mod: ModuleType) -> None:
    check_tested("megatron", getattr(mod, "__version__", "0"))


# -- layout ------------------------------------------------------------------------------------
def parallel_state(plugin, mod: ModuleType) -> None:
    """Tell the rank grouping what Megatron built: pipeline stages hold different layers;
    tensor, context, data and expert parallelism split evenly (Megatron checks that they
    divide), so their coordinates hold the same sizes."""
    original = mod.initialize_model_parallel
    layout = plugin.tracer.layout

    @functools.wraps(original)
    def initialize_model_parallel(*args, **kwargs):
        out = original(*args, **kwargs)
        if layout is not None:
            declare_layout(mod, layout, kwargs.get("order", "tp-cp-ep-dp-pp"))
        return out

    plugin.replace(mod, "initialize_model_parallel", initialize_model_parallel)


# -- phases ------------------------------------------------------------------------------------
def schedules(plugin, mod: ModuleType) -> None:
    phases = plugin.tracer.phases
    for name in SCHEDULES:
        original = getattr(mod, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        def schedule(*args, __original=original, **kwargs):
            phases.on_top_level_forward()  # forward_backward_iter_N begins (or stops)
            return __original(*args, **kwargs)

        plugin.patcher.setattr(mod, name, schedule)


def optimizer(plugin, mod: ModuleType) -> None:
    phases = plugin.tracer.phases

    def wrap_step(cls) -> None:
        original = cls.step

        @functools.wraps(original)
        def step(self, *args, **kwargs):
            phases.on_step_begin()
            try:
                if not getattr(self, "_memlens_states_marked", False):
                    mark_main_params(plugin, self)
                return original(self, *args, **kwargs)
            finally:
                phases.on_step_end()

        plugin.patcher.setattr(cls, "step", step)

    for cls in (mod.MegatronOptimizer, *_subclasses(mod.MegatronOptimizer)):
        if "step" in vars(cls):
            wrap_step(cls)


def fused_adam(plugin, mod: ModuleType) -> None:
    """Without Transformer Engine and apex Megatron runs torch's foreach Adam, whose
    full-size temporaries a GPU job's FusedAdam does not allocate: the fused one instead."""
    if not getattr(mod, "USING_PYTORCH_OPTIMIZER", False):
        return
    plugin.patcher.setattr(mod, "Adam", fused_adam_class(plugin))
    plugin.patcher.setattr(mod, "USING_PYTORCH_OPTIMIZER", False)


def distributed_optimizer(plugin, mod: ModuleType) -> None:
    """The distributed optimizer accepts only its own module's Adam: the same stand-in,
    whose step count is a group's host integer, as apex's FusedAdam keeps it."""
    if getattr(mod, "HAVE_APEX_OR_TE", True):
        return
    plugin.patcher.setattr(mod, "Adam", fused_adam_class(plugin))
    plugin.patcher.setattr(mod, "HAVE_APEX_OR_TE", True)
    plugin.patcher.setattr(mod, "USING_APEX_OPTIMIZER", True)


def fused_adam_class(plugin) -> type:
    if plugin.fused_adam is None:
        from .optimizer import fused_adam_class as base

        class FusedAdam(base()):
            def __init__(self, *args, **kwargs):
                plugin.note("Transformer Engine and apex are not installed here: Adam "
                            "holds what their FusedAdam, which Megatron selects on a GPU, "
                            "holds (two moments per parameter, updated in place: no "
                            "per-step full-size temporaries), not what torch's foreach "
                            "fallback allocates")
                super().__init__(*args, **kwargs)

        plugin.fused_adam = FusedAdam
    return plugin.fused_adam


def mark_main_params(plugin, optimizer) -> None:
    """The fp32 copies the inner torch optimizer updates are optimizer state (Megatron's
    12 bytes per parameter: main parameter, exp_avg, exp_avg_sq), owned by the module of
    the parameter they copy (so are the Adam moments the classifier finds for them)."""
    chained = vars(optimizer).get("chained_optimizers")
    for sub in chained or ():
        mark_main_params(plugin, sub)
    tracer = plugin.tracer
    owners = tracer.modules.param_owner
    for model_attr, main_attr in _MAIN_PARAM_GROUPS:
        for models, mains in zip(vars(optimizer).get(model_attr) or (),
                                 vars(optimizer).get(main_attr) or ()):
            for model, main in zip(models, mains):
                owner = owners.get(id(model))
                if owner is not None:
                    owners[id(main)] = owner
                tracer.classifier.pin(main, C.OPTIMIZER_STATE, owner)
    optimizer._memlens_states_marked = True


# -- buffers -----------------------------------------------------------------------------------
def buffers(plugin, mod: ModuleType) -> None:
    cls = mod.DistributedDataParallel
    original = cls.__init__
    tracer = plugin.tracer

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        owner = tracer.modules.index_of(self)  # the buffers' padding belongs to no layer
        for buffer in [*getattr(self, "buffers", ()),
                       *getattr(self, "expert_parallel_buffers", ())]:
            for name, category in (("param_data", C.PARAMETER), ("grad_data", C.GRADIENT)):
                data = getattr(buffer, name, None)
                if data is not None:
                    tracer.classifier.pin(data, category, owner)
                    share_by_parameter(tracer, buffer, data)

    plugin.patcher.setattr(cls, "__init__", __init__)


# -- saved weights ----------------------------------------------------------------------------
def linear_keeps_its_weight(plugin, mod: ModuleType) -> None:
    """Megatron's linear autograd function passes its weight's attributes (`main_grad`,
    `grad_added_to_main_grad`) from forward to backward on the saved weight itself: on a GPU
    backward unpacks the Parameter object. Under saved-tensor hooks (memlens counts activations
    with them) torch unpacks a saved leaf as a new tensor without those attributes, so with
    gradient accumulation fusion backward would return no weight gradient (nor DDP's dummy
    one), which `--overlap-grad-reduce` refuses. This function saves without memlens' hooks,
    as on a GPU, and what it saved is counted as activations all the same."""
    import torch

    cls = mod.LinearWithGradAccumulationAndAsyncCommunication
    original = cls.apply  # torch's Function.apply, bound to the class
    classifier = plugin.tracer.classifier
    hooks = torch._C._autograd

    def apply(cls, *args):
        top = hooks._top_saved_tensors_default_hooks(False)
        if top is None or top[0] != classifier.pack:  # another's hooks (checkpointing): theirs
            return original(*args)
        hooks._pop_saved_tensors_default_hooks()
        try:
            out = original(*args)
        finally:
            hooks._push_saved_tensors_default_hooks(*top)
        if out.grad_fn is not None:
            for saved in out.grad_fn.saved_tensors:
                classifier.saved_by_autograd(saved)
        return out

    plugin.patcher.setattr(cls, "apply", classmethod(apply))


# -- host reads --------------------------------------------------------------------------------
def utils(plugin, mod: ModuleType) -> None:
    """Without apex and Transformer Engine, Megatron's gradient norm builds a host tensor
    from every per-tensor norm (reading each one's value): the same norms, stacked on the
    device instead."""
    import torch

    def local_multi_tensor_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
        norms = [torch.norm(t) for tensors in tensor_lists for t in tensors]
        total = torch.norm(torch.stack(norms)) if norms else torch.zeros((), device="cuda")
        return total.reshape(1).float(), None

    if hasattr(mod, "local_multi_tensor_l2_norm"):
        plugin.replace(mod, "local_multi_tensor_l2_norm", local_multi_tensor_l2_norm)


def gpu_affinity(plugin, mod: ModuleType) -> None:
    """Megatron-LM pins each rank to its GPU's NUMA node's CPUs with
    `--fine-grained-activation-offloading` (`set_ideal_affinity_for_current_gpu`, through
    cuda-python and NVML): host placement only, nothing on the device. The simulated GPU has no
    NUMA node: skipped, and said."""
    if not hasattr(mod, "set_ideal_affinity_for_current_gpu"):
        return

    def set_ideal_affinity_for_current_gpu(*args, **kwargs) -> None:
        plugin.note("the rank's CPU affinity to its GPU's NUMA node (NVML) is not set: host "
                    "placement only, no device memory")

    plugin.replace(mod, "set_ideal_affinity_for_current_gpu", set_ideal_affinity_for_current_gpu)


def broadcast_sizes(plugin, mod: ModuleType) -> None:
    """`broadcast_data` (BERT's and T5's get_batch) sends the batch's sizes from the
    tensor-parallel group's first rank, and the other ranks read them out of the broadcast
    tensor: values a trace does not have (no sizes, and an empty batch). Every rank of the
    simulated job holds the same mock batch, so a later rank reads the sizes off its own, after
    the broadcast the GPU run makes; then it receives the batch into one buffer, as on a GPU."""
    original = getattr(mod, "_build_key_size_numel_dictionaries", None)
    if original is None:
        return

    @functools.wraps(original)
    def _build_key_size_numel_dictionaries(keys, data, *args, **kwargs):
        sent = original(keys, data, *args, **kwargs)  # its broadcast, as on a GPU
        if data is None:
            return sent
        key_size = {key: list(data[key].size()) for key in keys}
        key_numel = {key: data[key].numel() for key in keys}
        return key_size, key_numel, sum(key_numel.values())

    plugin.replace(mod, "_build_key_size_numel_dictionaries", _build_key_size_numel_dictionaries)


# -- RNG ---------------------------------------------------------------------------------------
def rng(plugin, mod: ModuleType) -> None:
    from . import rng as megatron_rng

    plugin.replace(mod, "_get_cuda_rng_state", megatron_rng.get_state)
    plugin.replace(mod, "_set_cuda_rng_state", megatron_rng.set_state)
    plugin.patcher.setattr(mod.CudaRNGStatesTracker, "fork", megatron_rng.fork)


def _subclasses(cls) -> list:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def uneven_dtensor(plugin, mod: ModuleType) -> None:
    """Megatron-FSDP's `validate_uneven_dtensor` gathers each shard's chunk metadata (the
    other ranks' shard sizes), asserts the offsets it computes from them are in bounds, then
    all-reduces (MAX) over the sharding ranks whether some rank's chunk starts and some ends
    each dimension, and asserts that: values other ranks send, which a trace of one rank does
    not have (either assert failed on the first parameter). Megatron skips the second itself
    under its fake process group, as "only rank 0's boundaries are visible"; a trace's process
    group is NCCL's, so both are skipped here, and the metadata is still gathered (its
    collective and buffers are the GPU run's)."""
    gather = getattr(mod, "gather_and_compute_chunk_metadata", None)
    if gather is None or not hasattr(mod, "validate_uneven_dtensor"):
        return

    def validate_uneven_dtensor(dtensor) -> None:
        gather(dtensor)

    plugin.replace(mod, "validate_uneven_dtensor", validate_uneven_dtensor)


def fsdp_adapter(plugin, mod: ModuleType) -> None:
    """Megatron-FSDP's adapter synchronizes the tensor-parallel RNG states from the group's
    first rank with `broadcast_object_list`, and loads what it received: another rank's
    objects, which a trace of this rank does not have (None, and a TypeError loading it). The
    states' values do not change memory; each rank keeps its own, which are the same kind."""
    cls = getattr(mod, "FullyShardedDataParallel", None)
    if cls is None or not hasattr(cls, "sync_rng_states_across_tp_group"):
        return
    plugin.patcher.setattr(cls, "sync_rng_states_across_tp_group", lambda self: None)


PATCHES = {
    "megatron.core.package_info": check_version,
    "megatron.core.utils": utils,
    "megatron.core.parallel_state": parallel_state,
    "megatron.core.tensor_parallel.random": rng,
    "megatron.core.pipeline_parallel.schedules": schedules,
    "megatron.core.pipeline_parallel.utils": gpu_affinity,
    "megatron.core.optimizer": fused_adam,
    "megatron.core.optimizer.distrib_optimizer": distributed_optimizer,
    "megatron.core.optimizer.optimizer": optimizer,
    "megatron.core.distributed.distributed_data_parallel": buffers,
    "megatron.core.tensor_parallel.layers": linear_keeps_its_weight,
    "megatron.core.tensor_parallel.data": broadcast_sizes,
    "megatron.core.distributed.fsdp.src.megatron_fsdp.uneven_dtensor": uneven_dtensor,
    "megatron.core.distributed.fsdp.mcore_fsdp_adapter": fsdp_adapter,
}
