"""What ZeRO's optimizers hold, put in the categories of ZeRO's accounting.

DeepSpeed copies the model into flat buffers of its own, so the classifier's hooks (registered
parameters, `.grad`, `optimizer.state`) do not see all of it. After each ZeRO optimizer is
built its buffers are pinned to what they are (owned by no layer: a flat buffer spans all):
- the 16-bit flat buffers the model's parameters become views of: parameters
  (stage 1/2 `bit16_groups_flat`, stage 3 `fp16_partitioned_groups_flat`), and with
  `offload_optimizer` stage 1/2's host copy of the updated 16-bit partition;
- the fp32 master partition the inner optimizer updates: optimizer state, with Adam's moments
  (stage 1/2 `single_partition_of_fp32_groups`, stage 3 `fp32_partitioned_groups_flat`), on
  the host with `offload_optimizer`;
- the gradient buckets gradients are reduced through, stage 2's buffer of the partition's
  reduced gradients (`grads_in_partition`, made at the first backward) and stage 3's flat
  buffer of gradient partitions, and the staging buffers gradients are offloaded through:
  gradients (as DDP's buckets are).
"""

from __future__ import annotations

import functools

from ... import categories as C

# stage module -> (optimizer class, parameter buffers, master partitions, gradient buffers)
_BUFFERS = {
    "stage_1_and_2": ("DeepSpeedZeroOptimizer",
                      ("bit16_groups_flat", "param_buffer_of_bit16_for_cpu_offload_groups"),
                      "single_partition_of_fp32_groups",
                      ("temp_grad_buffer_for_gpu_offload", "temp_grad_buffer_for_cpu_offload")),
    # Without ZeRO (stage 0) the engine wraps the optimizer in FP16_Optimizer (fp16, and bf16
    # with bf16 gradients) or BF16_Optimizer (bf16 with fp32 gradient accumulation, pipelines):
    # the same flat 16-bit model and fp32 master copy, whole on every rank.
    "fused_optimizer": ("FP16_Optimizer", ("fp16_groups_flat",), "fp32_groups_flat", ()),
    # ... or FP16_UnfusedOptimizer (LAMB): an fp32 copy of each parameter, in groups.
    "unfused_optimizer": ("FP16_UnfusedOptimizer", (), "fp32_groups", ()),
    "bf16_optimizer": ("BF16_Optimizer", ("bf16_groups_flat",), "fp32_groups_flat_partition",
                       ("fp32_groups_gradients_flat",)),
    "stage3": ("DeepSpeedZeroOptimizer_Stage3", ("fp16_partitioned_groups_flat",),
               "fp32_partitioned_groups_flat", ("grad_partitions_flat_buffer",)),
}


def _tensors(value):
    """The tensors of an attribute: one, a list, or a list of groups."""
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return [] if value is None else [value]


def _pin_buckets(classifier, optimizer) -> None:
    for t in _tensors(vars(optimizer).get("grads_in_partition")):
        classifier.pin(t, C.GRADIENT)
    for bucket in (getattr(optimizer, "ipg_buckets", None) or {}).values():
        for t in _tensors(getattr(bucket, "buffer", None)):
            classifier.pin(t, C.GRADIENT)


def _then_pin_buckets(method, classifier):
    @functools.wraps(method)
    def then_pin(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        _pin_buckets(classifier, self)
        return out

    return then_pin


def patch(plugin, mod, stage: str) -> None:
    """Wrap the stage's optimizer so that its buffers are classified once it is built."""
    name, params, masters, grads = _BUFFERS[stage]
    cls = getattr(mod, name)
    classifier = plugin.tracer.classifier
    original_init = cls.__init__

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        for attr in params:
            for t in _tensors(getattr(self, attr, None)):
                classifier.pin(t, C.PARAMETER)
        for t in _tensors(getattr(self, masters, None)):
            classifier.pin(t, C.OPTIMIZER_STATE)
        for attr in grads:
            for t in _tensors(getattr(self, attr, None)):
                classifier.pin(t, C.GRADIENT)
        _pin_buckets(classifier, self)

    plugin.patcher.setattr(cls, "__init__", __init__)
    # Stages 1/2 make their bucket buffers anew at each micro-step (setup_buckets); stage 2
    # makes its buffer of reduced gradients on first use (copy_grads_in_partition).
    for name in ("setup_buckets", "copy_grads_in_partition"):
        method = cls.__dict__.get(name)
        if method is not None:
            plugin.patcher.setattr(cls, name, _then_pin_buckets(method, classifier))
