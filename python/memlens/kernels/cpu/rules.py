"""Transient buffers of CPU kernels: the rules for the ops whose kernels allocate memory that is
no op output (see `kernels.buffers.WorkspaceModel`). Each rule lives with its kernel family in
`kernels/cpu/`, and cites the kernel source it reproduces."""

import torch

from .. import logsumexp
from . import attention, conv, embedding, matmul, norm, scalars

aten = torch.ops.aten

CPU_RULES: dict = {
    aten.convolution.default: conv.convolution,
    aten.convolution_backward.default: conv.convolution_backward,
    aten.native_batch_norm.default: norm.batch_norm,
    aten.native_batch_norm_backward.default: norm.batch_norm_backward,
    aten.native_layer_norm_backward.default: norm.layer_norm_backward,
    aten.mm.default: matmul.mm,
    aten.addmm.default: matmul.addmm,
    aten.bmm.default: matmul.bmm,
    aten.baddbmm.default: matmul.baddbmm,
    aten._safe_softmax.default: attention.safe_softmax,
    aten.logsumexp.default: logsumexp.cpu,
    aten._scaled_dot_product_flash_attention_for_cpu.default: attention.flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
        attention.flash_attention_backward,
    aten.embedding.default: embedding.embedding,
    aten.embedding_dense_backward.default: embedding.embedding_dense_backward,
    aten.mean.dim: scalars.mean,
    aten.mean.default: scalars.mean,
}
for _name in ("add", "sub", "mul", "div"):
    for _overload in ("Tensor", "Scalar"):
        for _op in (getattr(aten, _name), getattr(aten, _name + "_")):
            CPU_RULES[getattr(_op, _overload)] = scalars.binary
