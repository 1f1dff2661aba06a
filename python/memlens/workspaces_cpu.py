"""Transient buffers of CPU kernels: the rules for the ops whose kernels allocate memory that is
no op output (see `workspaces.WorkspaceModel`). Each rule lives with its kernel family in
`cpukernels/`, and cites the kernel source it reproduces."""

import torch

from .cpukernels import conv

aten = torch.ops.aten

CPU_RULES: dict = {
    aten.convolution.default: conv.convolution,
    aten.convolution_backward.default: conv.convolution_backward,
}
