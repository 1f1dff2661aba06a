"""Normalization kernels on the CPU: the buffers batch norm and layer norm allocate besides
their outputs.

Batch norm (aten/src/ATen/native/Normalization.cpp `batch_norm_cpu`, `batch_norm_backward_cpu_
template`; aten/src/ATen/native/cpu/batch_norm_kernel.cpp):
  forward   with batch statistics, `batch_norm_cpu_update_stats_template` allocates `_mean` and
            `_var_sum` (C, parameter dtype); the channels-last statistics kernel (used for
            channels-last inputs and for inputs with one element per channel and sample, e.g.
            BatchNorm1d on (N, C)) adds a per-thread buffer (threads, C) of the accumulation
            type. Then `batch_norm_cpu_transform_input_template` allocates `alpha` and `beta`
            (C, accumulation type).
  backward  when input and grad_output are contiguous in the same memory format, grad_input is
            allocated twice (`empty_like`, then again in the format `suggest_memory_format_
            contig` gives), the first freed on reassignment; the channels-last kernel then
            converts weight (ones when absent), mean and invstd to the accumulation type when
            the parameters are low precision (with fp32 parameters: ones for a missing weight,
            and invstd computed from running_var in eval), and allocates a (2, threads, C)
            accumulation buffer. Otherwise a (C,) `sum` of grad_output is a temporary.
Layer norm (aten/src/ATen/native/layer_norm.cpp `layer_norm_backward_cpu`, cpu/layer_norm_
kernel.cpp `LayerNormBackwardKernelImplInternal`): grad_output made contiguous, then a
(2 * threads, N) buffer of the input dtype for the gamma/beta partial sums, when either is
wanted. The forward allocates nothing else.
"""

from __future__ import annotations

import math

import torch

from ..plan import Plan


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _accumulation_size(t: torch.Tensor) -> int:
    return 8 if t.dtype == torch.float64 else 4  # at::opmath_type


def _memory_format(t: torch.Tensor):
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) \
            and not t.is_contiguous():
        return torch.channels_last
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) \
            and not t.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format


def _channels_last_kernel(input: torch.Tensor) -> bool:
    """The kernels' dispatch: channels-last layout, or one element per (sample, channel)."""
    image = input.numel() // max(input.shape[0] * input.shape[1], 1) if input.dim() > 1 else 1
    return _memory_format(input) != torch.contiguous_format or image == 1


def _param_size(input, weight) -> int:
    return (weight if weight is not None else input).element_size()


def batch_norm(args, kwargs, out):
    input, weight, bias, running_mean, running_var, training = args[:6]
    channels = input.shape[1] if input.dim() > 1 else 1
    acc = _accumulation_size(input)
    sizes = []
    if training or running_mean is None:
        param = _param_size(input, weight)
        sizes += [channels * param, channels * param]
        if _channels_last_kernel(input):
            sizes.append(torch.get_num_threads() * channels * acc)
        plan = Plan()
        plan.free(*[plan.alloc(n) for n in sizes])
    else:
        plan = Plan()
    plan.free(plan.alloc(channels * acc), plan.alloc(channels * acc))
    return plan


def batch_norm_backward(args, kwargs, out):
    grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train = args[:8]
    mask = args[9] if len(args) > 9 else kwargs.get("output_mask", [True, True, True])
    channels = input.shape[1] if input.dim() > 1 else 1
    acc = _accumulation_size(input)
    plan = Plan()
    contiguous = (input.is_contiguous(memory_format=_memory_format(input))
                  and _memory_format(input) == _memory_format(grad_out)
                  and grad_out.is_contiguous(memory_format=_memory_format(grad_out)))
    if not contiguous:
        plan.free(plan.alloc(channels * grad_out.element_size()))
        return plan
    if mask[0]:
        first = plan.alloc(_nbytes(input))
        plan.outputs(1, 2, 0)
        plan.free(first)
    if _channels_last_kernel(input):
        if _param_size(input, weight) < acc:
            converted = 3
        else:
            converted = (weight is None) + (not train)
        held = [plan.alloc(channels * acc) for _ in range(converted)]
        plan.free(plan.alloc(2 * torch.get_num_threads() * channels * acc), *reversed(held))
    return plan


def layer_norm_backward(args, kwargs, out):
    grad_out, input, normalized_shape, mean, rstd, weight, bias = args[:7]
    mask = args[7] if len(args) > 7 else kwargs.get("output_mask", [True, True, True])
    sizes = [] if grad_out.is_contiguous() else [_nbytes(grad_out)]
    if mask[1] or mask[2]:
        n = math.prod(normalized_shape)
        sizes.append(2 * torch.get_num_threads() * n * input.element_size())
    return sizes
