"""What a CUDA GPU would do, on whatever torch build traces the step.

- `F.scaled_dot_product_attention`: the fused kernel PyTorch picks on the simulated GPU
  (see memlens/cuda/sdpa.py) instead of the host build's math decomposition; in a compiled
  region, through an op of memlens' (`memlens::scaled_dot_product_attention`) that is that
  choice, defined for the trace only.
- `torch.version.cuda`, `torch.backends.cuda.is_built()`: scripts that branch on the build see
  a CUDA build.
- `aten::_thnn_fused_gru_cell` (and its backward): `nn.GRU` on a CUDA tensor without cuDNN takes
  ATen's fused cell per time step, which has no Meta kernel (the LSTM's has one). A Meta kernel
  with ATen's shapes (hy like hx, a (batch, 5*hidden) workspace saved for backward) is
  registered for the trace and removed after it.
- `torch._grouped_mm` on float32/float16 (mixture-of-experts layers): CUDA's fallback, whose
  Meta kernel torch lacks (grouped_mm_fallback.py); `_scaled_mm.out`, the FP8 GEMM a compiled
  graph calls, whose Meta kernel torch 2.13 lacks (scaled_mm_out.py).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..cuda import sdpa
from ..devices import DeviceSpec
from . import grouped_mm_fallback, scaled_mm_out
from .patcher import Patcher, check_tested

CUDA_VERSION = "13.0"  # what a current PyTorch wheel for Hopper/Blackwell is built with


def _gru_cell_meta(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    return torch.empty_like(hx), hx.new_empty((hx.size(0), hx.size(1) * 5))


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    batch, hidden = grad_hy.shape
    grad_input_gates = grad_hy.new_empty((batch, 3 * hidden))
    grad_hidden_gates = grad_hy.new_empty((batch, 3 * hidden))
    biases = ((grad_hy.new_empty((3 * hidden,)), grad_hy.new_empty((3 * hidden,))) if has_bias
              else (grad_hy.new_empty((0,)), grad_hy.new_empty((0,))))
    return grad_input_gates, grad_hidden_gates, torch.empty_like(grad_hy), *biases


def _register_gru_cell(patcher: Patcher) -> None:
    aten = torch.ops.aten
    if torch._C._dispatch_has_kernel_for_dispatch_key(aten._thnn_fused_gru_cell.default.name(),
                                                      "Meta"):
        return  # a torch that has its own
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_thnn_fused_gru_cell", _gru_cell_meta, "Meta")
    lib.impl("_thnn_fused_gru_cell_backward", _gru_cell_backward_meta, "Meta")
    patcher.defer(lib._destroy)


_SDPA_SCHEMA = ("scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
                "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, "
                "float? scale=None, bool enable_gqa=False) -> Tensor")


def _composite_op(patcher: Patcher, implementation):
    """`memlens::scaled_dot_product_attention`, implemented by `implementation` for every
    backend and for autograd (it calls ATen ops that have their own), defined for the trace and
    removed after it."""
    lib = torch.library.Library("memlens", "FRAGMENT")
    lib.define(_SDPA_SCHEMA)
    lib.impl("scaled_dot_product_attention", implementation, "CompositeImplicitAutograd")
    patcher.defer(lib._destroy)
    return torch.ops.memlens.scaled_dot_product_attention.default


def apply(patcher: Patcher, device: DeviceSpec, log: sdpa.SdpaLog) -> None:
    """`log`: where the attention kernels that ran are recorded (the snapshot's meta.sdpa)."""
    check_tested("torch_cuda_semantics", torch.__version__)
    _register_gru_cell(patcher)
    grouped_mm_fallback.apply(patcher)
    scaled_mm_out.apply(patcher)
    cc = (device.major, device.minor)
    math = F.scaled_dot_product_attention

    @functools.wraps(math)
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "cuda":
            return math(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        backend = sdpa.select_backend(query, key, value, attn_mask, dropout_p, is_causal,
                                      enable_gqa, cc, log.pinned)
        log.record(backend)
        return sdpa.run(backend, query, key, value, attn_mask, dropout_p, is_causal, scale,
                        enable_gqa, math)

    # Dynamo cannot trace the choice (it reads torch._C's SDPA flags): in a compiled region the
    # call is one op of memlens' whose implementation is that choice, CompositeImplicitAutograd,
    # so AOTAutograd traces through it and the graph holds the chosen kernel. It was a
    # nonstrict_trace'd function, whose argument spec (a pytree TreeSpec) broke graphs where
    # the call sat inside a higher-order op's body (a compiled torch.utils.checkpoint block)
    # under dynamic shapes.
    opaque = _composite_op(patcher, scaled_dot_product_attention)

    @functools.wraps(math)
    def dispatch(query, key, value, attn_mask=None, dropout_p=None, is_causal=False, scale=None,
                 enable_gqa=False):
        # No float default: under dynamic shapes Dynamo makes a float it reads from a function's
        # defaults a symbolic input, and a second checkpointed block's graph then referred to
        # the first block's (an AssertionError in lift_tracked_freevar_to_input).
        dropout_p = 0.0 if dropout_p is None else dropout_p
        if not torch.compiler.is_compiling():
            return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                                is_causal, scale, enable_gqa)
        return opaque(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    patcher.setattr(F, "scaled_dot_product_attention", dispatch)
    if torch.version.cuda is None:
        patcher.setattr(torch.version, "cuda", CUDA_VERSION)
        patcher.setattr(torch.backends.cuda, "is_built", lambda: True)
