"""The stand-ins for apex's fused softmax kernels (plugins/megatron/kernels.py), which Megatron's
FusedScaleMaskSoftmax calls where they are not installed: their backward writes where apex's
writes (csrc/megatron/*_softmax_cuda.cu). The causal and the unmasked kernels compute the input
gradient in place, into the output gradient ("backward pass is completely in-place"); the
masked one into a new tensor. In place, a softmax backward of a b x heads x s x s score
tensor allocates nothing, where a new gradient would take as much again as the scores."""

from __future__ import annotations

import importlib

import pytest
import torch

from memlens.plugins.megatron import kernels


@pytest.fixture()
def softmax_kernels():
    added = kernels.install()
    try:
        yield {name: importlib.import_module(name) for name in kernels.NAMES}
    finally:
        kernels.uninstall(added)


@pytest.mark.parametrize("name,shape", [("scaled_upper_triang_masked_softmax_cuda", (8, 16, 16)),
                                        ("scaled_softmax_cuda", (2, 4, 16, 16))])
def test_causal_and_unmasked_backward_are_in_place(softmax_kernels, name, shape):
    grad, probs = torch.ones(shape), torch.ones(shape)
    assert softmax_kernels[name].backward(grad, probs, 1.0) is grad
    strided = torch.ones(shape[::-1]).transpose(0, -1)  # not contiguous: apex copies it first
    out = softmax_kernels[name].backward(strided, probs, 1.0)
    assert out is not strided and out.is_contiguous() and out.shape == strided.shape


def test_masked_backward_makes_a_new_gradient(softmax_kernels):
    grad, probs = torch.ones(2, 4, 16, 16), torch.ones(2, 4, 16, 16)
    out = softmax_kernels["scaled_masked_softmax_cuda"].backward(grad, probs, 1.0)
    assert out is not grad and out.shape == grad.shape
    assert out.untyped_storage().data_ptr() != grad.untyped_storage().data_ptr()
