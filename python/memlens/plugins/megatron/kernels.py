"""Stand-ins for Megatron's fused softmax CUDA extensions, when they are not installed, and for
Transformer Engine's fused RoPE (`fused_rope_function`).

Megatron-LM enables `masked_softmax_fusion` by default; its fused kernels (apex's
`scaled_masked_softmax_cuda`, `scaled_upper_triang_masked_softmax_cuda`,
`scaled_softmax_cuda`) return the probabilities in a new tensor of the input's shape and keep
that tensor for backward, which writes the input gradient into the output gradient in place
(causal and unmasked) or into a new tensor (masked; apex's csrc/megatron at its main branch):
that is all a memory trace needs of them. Imported by name inside Megatron's functions, so they
are put in `sys.modules` for the trace only. `get_batch_per_block` follows the kernels' launch arithmetic (it decides whether
Megatron takes the fused path).
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from types import ModuleType

NAMES = ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda",
         "scaled_softmax_cuda")


def _forward(inputs, *rest):
    import torch

    return torch.empty_like(inputs)


def backward_new(output_grads, softmax_results, *rest):
    """apex's scaled_masked_softmax: the input gradient in a new tensor."""
    import torch

    return torch.empty_like(output_grads)


def backward_in_place(output_grads, softmax_results, *rest):
    """apex's scaled_upper_triang_masked_softmax and scaled_softmax: "backward pass is
    completely in-place", into the output gradient (made contiguous first)."""
    return output_grads.contiguous()


BACKWARDS = {"scaled_masked_softmax_cuda": backward_new,
             "scaled_upper_triang_masked_softmax_cuda": backward_in_place,
             "scaled_softmax_cuda": backward_in_place}


def _batch_per_block(query_seq_len: int, key_seq_len: int, batches: int, attn_heads: int) -> int:
    """The kernels' batches per thread block: 128 threads, warps of min(32, 2^ceil(log2 sk))
    lanes, two rows per warp up to 128 keys."""
    next_power_of_two = 1 << max(0, (int(key_seq_len) - 1).bit_length())
    warp_size = min(next_power_of_two, 32)
    batches_per_warp = 2 if next_power_of_two <= 128 else 1
    return (128 // warp_size) * batches_per_warp


def install() -> list[str]:
    """Put the stand-ins that are missing into sys.modules; returns their names."""
    added = []
    for name in NAMES:
        if name in sys.modules or find_spec(name) is not None:
            continue
        module = ModuleType(name, "memlens stand-in for a Megatron fused softmax kernel")
        module.forward, module.backward = _forward, BACKWARDS[name]
        module.get_batch_per_block = _batch_per_block
        module.__memlens_stand_in__ = True
        sys.modules[name] = module
        added.append(name)
    return added


def uninstall(names: list[str]) -> None:
    for name in names:
        module = sys.modules.get(name)
        if getattr(module, "__memlens_stand_in__", False):
            del sys.modules[name]


_FUSED_ROPE = None


def fused_rope_function():
    """An autograd function with TE's fused RoPE's memory: output like the input, the
    frequencies saved, a gradient like the output's."""
    global _FUSED_ROPE
    if _FUSED_ROPE is None:
        import torch

        class FusedRoPE(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t, freqs):
                ctx.save_for_backward(freqs)
                return torch.empty_like(t)

            @staticmethod
            def backward(ctx, grad):
                ctx.saved_tensors  # unpacked as TE's does: saved-tensor hooks see it
                return torch.empty_like(grad), None

        _FUSED_ROPE = FusedRoPE
    return _FUSED_ROPE
