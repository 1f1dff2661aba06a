"""Convolutions on the CPU: what `aten.convolution` and `aten.convolution_backward` allocate
besides their outputs, for the backend PyTorch picks (`torch._C._select_conv_backend`, the same
function aten/src/ATen/native/Convolution.cpp `_convolution` / `convolution_backward` call).

Mkldnn (aten/src/ATen/native/mkldnn/Conv.cpp, ideep operators/conv.hpp), NCHW tensors:
  forward   `_mkldnn_convolution` -> ideep `convolution_forward::do_compute`: a scratchpad, the
            input and weight reordered into the layouts oneDNN chose (when they differ from
            the plain tensors), the result in oneDNN's layout; those three are freed, then
            `mkldnn_to_dense` allocates the output and copies the result into it.
  backward  `mkldnn_convolution_backward`: `mkldnn_convolution_backward_input` (ideep
            `convolution_backward_data::compute_v2`: grad_output and weight reordered, grad_input
            in oneDNN's layout, scratchpad; then `mkldnn_to_dense`) and
            `mkldnn_convolution_backward_weights` (ideep `convolution_backward_weights::
            compute_impl`: grad_output and input reordered, grad_weight in oneDNN's layout,
            scratchpad, grad_bias; then `mkldnn_to_dense` of grad_bias and grad_weight).
  The layouts and scratchpad sizes come from oneDNN itself (see `onednn.py`).
  `mkldnn_to_dense` (MKLDNNConversions.cpp) copies a plain but permuted layout (e.g. `acdb`)
  into a dense tensor of that layout and then `.contiguous()` copies it again.

Slow2d (aten/src/ATen/native/ConvolutionMM2d.cpp): the forward allocates the im2col column
buffer `compute_columns2d` (N, C*kh*kw, oH*oW) before the output unless the kernel is 1x1 with
stride 1 and no padding; the backward allocates the same columns for grad_weight after its
outputs (grad_input's per-thread columns come from `std::make_unique`, not the allocator).

SlowDilated2d (aten/src/ATen/native/NaiveDilatedConvolution.cpp): one sample's columns
(C*kh*kw, oH*oW), resized after the outputs, in the forward and in the backward (which also sums
grad_bias into a temporary).

Not modelled (the rules return None): transposed, channels-last and grouped slow convolutions,
and any other backend.
"""

from __future__ import annotations

import math

import torch

from ..plan import Plan
from . import onednn
from .onednn import Memory

_Backend = torch._C._ConvBackend


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _contiguous_strides(dims) -> tuple:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def _copy_unless_contiguous(plan: Plan, t: torch.Tensor) -> list[int]:
    """`t.contiguous()`: a copy when `t` is not contiguous."""
    return [] if t.is_contiguous() else [plan.alloc(_nbytes(t))]


def _to_dense(plan: Plan, layout, dims, nbytes: int, index: int | None) -> list[int]:
    """mkldnn_to_dense: a dense tensor in the result's public layout, then `.contiguous()`, which
    copies when that layout is a permutation (e.g. `acdb`). Books output `index`; with None the
    dense tensor is no op output and its handle is returned, still held."""
    permuted = (layout is not None and not layout.blocked
                and layout.strides != _contiguous_strides(dims))
    first = plan.alloc(nbytes) if permuted else None
    if index is None:
        result = plan.alloc(nbytes)
        if first is not None:
            plan.free(first)
        return [result]
    plan.outputs(index)
    if first is not None:
        plan.free(first)
    return []


def _args(args, kwargs, names):
    return [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(names)]


_FORWARD = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
            "output_padding", "groups")
_BACKWARD = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation",
             "transposed", "output_padding", "groups", "output_mask")


def _backend(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
             bias_sizes=None):
    return torch._C._select_conv_backend(input, weight, bias, list(stride), list(padding),
                                         list(dilation), transposed, list(output_padding),
                                         groups, bias_sizes)


def _as_4d(shape):
    """_convolution views a 1-d convolution as a 2-d one of height 1 (view1d_as_2d)."""
    shape = tuple(shape)
    return shape[:2] + (1,) + shape[2:] if len(shape) == 3 else shape


def _geometry(stride, padding, dilation, ndim):
    if ndim == 3:
        return (1, *stride), (0, *padding), (1, *dilation)
    return tuple(stride), tuple(padding), tuple(dilation)


def _weights(weight_shape, groups, dtype) -> Memory:
    """The plain weight as ideep's make_grouped_weights sees it: (G, O/G, I/G, k...) when
    groups > 1."""
    dims = _as_4d(weight_shape)
    if groups > 1:
        dims = (groups, dims[0] // groups) + dims[1:]
    return Memory(dims, dtype, _contiguous_strides(dims))


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def convolution(args, kwargs, out):
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups = \
        _args(args, kwargs, _FORWARD)
    if transposed or not isinstance(out, torch.Tensor):
        return None
    backend = _backend(input, weight, bias, stride, padding, dilation, transposed,
                       output_padding, groups)
    if backend == _Backend.Mkldnn:
        return _mkldnn_forward(input, weight, bias, stride, padding, dilation, groups, out)
    if backend == _Backend.Slow2d and groups == 1:
        return _slow2d_forward(input, weight, stride, padding, out)
    if backend == _Backend.SlowDilated2d and groups == 1:
        return _dilated_forward(input, weight, out)
    return None


def convolution_backward(args, kwargs, out):
    (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
     output_padding, groups, mask) = _args(args, kwargs, _BACKWARD)
    if transposed:
        return None
    backend = _backend(input, weight, None, stride, padding, dilation, transposed,
                       output_padding, groups, bias_sizes)
    if backend == _Backend.Mkldnn:
        return _mkldnn_backward(grad_output, input, weight, stride, padding, dilation, groups,
                                mask)
    if backend == _Backend.Slow2d and groups == 1:
        return _slow2d_backward(grad_output, input, weight, stride, padding, mask)
    if backend == _Backend.SlowDilated2d and groups == 1:
        return _dilated_backward(grad_output, input, weight, mask)
    return None


# -- Mkldnn ------------------------------------------------------------------------------------
def _channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
        memory_format=torch.channels_last)


def _mkldnn_forward(input, weight, bias, stride, padding, dilation, groups, out):
    if not onednn.available() or _channels_last(input) or _channels_last(weight):
        return None
    plan = Plan()
    copies = _copy_unless_contiguous(plan, input) + _copy_unless_contiguous(plan, weight)
    dtype, ndim = _dtype(input), input.dim()
    stride, padding, dilation = _geometry(stride, padding, dilation, ndim)
    src_dims, dst_dims = _as_4d(input.shape), _as_4d(out.shape)
    prim = onednn.conv_forward(
        Memory(src_dims, dtype, _contiguous_strides(src_dims)),
        _weights(weight.shape, groups, dtype),
        Memory((weight.shape[0],), _dtype(bias), (1,)) if bias is not None else None,
        Memory(dst_dims, dtype), stride, dilation, padding)
    scratch = plan.alloc(prim.nbytes("scratchpad"))
    src = plan.alloc(0 if prim.layouts["src"].same_as_given else prim.nbytes("src"))
    wei = plan.alloc(0 if prim.layouts["weights"].same_as_given else prim.nbytes("weights"))
    dst = plan.alloc(prim.nbytes("dst"))
    plan.free(wei, src, scratch)
    _to_dense(plan, prim.layouts.get("dst"), dst_dims, _nbytes(out), 0)
    plan.free(dst, *copies)
    return plan


def _mkldnn_backward(grad_output, input, weight, stride, padding, dilation, groups, mask):
    if not onednn.available() or _channels_last(input) or _channels_last(weight):
        return None
    plan = Plan()
    copies = (_copy_unless_contiguous(plan, input) + _copy_unless_contiguous(plan, grad_output)
              + _copy_unless_contiguous(plan, weight))
    dtype, ndim = _dtype(input), input.dim()
    stride, padding, dilation = _geometry(stride, padding, dilation, ndim)
    src_dims, dst_dims = _as_4d(input.shape), _as_4d(grad_output.shape)
    src = Memory(src_dims, dtype, _contiguous_strides(src_dims))
    diff_dst = Memory(dst_dims, dtype, _contiguous_strides(dst_dims))
    weights = _weights(weight.shape, groups, dtype)
    if mask[0]:
        prim = onednn.conv_backward_data(src, weights, diff_dst, stride, dilation, padding)
        gy = plan.alloc(0 if prim.layouts["diff_dst"].same_as_given else prim.nbytes("diff_dst"))
        w = plan.alloc(0 if prim.layouts["weights"].same_as_given else prim.nbytes("weights"))
        gx = plan.alloc(prim.nbytes("diff_src"))
        scratch = plan.alloc(prim.nbytes("scratchpad"))
        plan.free(scratch, w, gy)
        _to_dense(plan, prim.layouts.get("diff_src"), src_dims, _nbytes(input), 0)
        plan.free(gx)
    if mask[1] or mask[2]:
        bias = Memory((weight.shape[0],), dtype) if mask[2] else None
        prim = onednn.conv_backward_weights(src, weights, bias, diff_dst, stride, dilation,
                                            padding)
        gy = plan.alloc(0 if prim.layouts["diff_dst"].same_as_given else prim.nbytes("diff_dst"))
        x = plan.alloc(0 if prim.layouts["src"].same_as_given else prim.nbytes("src"))
        gw = plan.alloc(prim.nbytes("diff_weights"))
        scratch = plan.alloc(prim.nbytes("scratchpad"))
        gb = plan.alloc(prim.nbytes("diff_bias") if mask[2] else 0)
        plan.free(scratch, x, gy)
        if mask[2]:
            plan.outputs(2)
        held = _to_dense(plan, prim.layouts.get("diff_weights"), weights.dims, _nbytes(weight),
                         1 if mask[1] else None)
        plan.free(gw, gb, *held)
    plan.free(*copies)
    return plan


# -- Slow2d ------------------------------------------------------------------------------------
def _columns(input, weight, stride, padding, out_spatial) -> int:
    """compute_columns2d: none for a 1x1 kernel with stride 1 and no padding."""
    kernel = tuple(weight.shape[2:])
    if all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(padding):
        return 0
    return input.shape[0] * input.shape[1] * math.prod(kernel) * math.prod(out_spatial) * \
        input.element_size()


def _slow2d_forward(input, weight, stride, padding, out):
    if input.dim() != 4:
        return None
    plan = Plan()
    copies = _copy_unless_contiguous(plan, input) + _copy_unless_contiguous(plan, weight)
    columns = plan.alloc(_columns(input, weight, stride, padding, out.shape[2:]))
    plan.outputs(0)
    plan.free(columns, *copies)
    return plan


def _slow2d_backward(grad_output, input, weight, stride, padding, mask):
    """slow_conv2d_backward_out_cpu: grad_input (its template makes grad_output contiguous for
    itself), grad_bias (sum_out), then grad_weight with its own contiguous grad_output and the
    columns."""
    if input.dim() != 4:
        return None
    plan = Plan()
    if mask[0]:
        copy = _copy_unless_contiguous(plan, grad_output)
        plan.outputs(0)
        plan.free(*copy)
    plan.outputs(2)
    if mask[1]:
        plan.outputs(1)
        copy = _copy_unless_contiguous(plan, grad_output)
        plan.free(plan.alloc(_columns(input, weight, stride, padding, grad_output.shape[2:])),
                  *copy)
    return plan


def _dilated_columns(input, weight, out_spatial) -> int:
    return input.shape[1] * math.prod(weight.shape[2:]) * math.prod(out_spatial) * \
        input.element_size()


def _dilated_forward(input, weight, out):
    """slow_conv_dilated_all_cpu_template: the output, then one sample's columns."""
    if input.dim() != 4:
        return None
    plan = Plan()
    copies = _copy_unless_contiguous(plan, input) + _copy_unless_contiguous(plan, weight)
    plan.outputs(0)
    plan.free(plan.alloc(_dilated_columns(input, weight, out.shape[2:])), *copies)
    return plan


def _dilated_backward(grad_output, input, weight, mask):
    """slow_conv_dilated2d_backward_cpu: grad_output made contiguous, the outputs, one sample's
    columns, and grad_bias summed into a temporary before it is copied out."""
    if input.dim() != 4:
        return None
    plan = Plan()
    copies = _copy_unless_contiguous(plan, grad_output) + _copy_unless_contiguous(plan, input)
    plan.outputs(0, 1, 2)
    columns = plan.alloc(_dilated_columns(input, weight, grad_output.shape[2:])
                         if mask[0] or mask[1] else 0)
    bias = plan.alloc(weight.shape[0] * grad_output.element_size() if mask[2] else 0)
    plan.free(bias, columns, *copies)
    return plan
