"""What a CUDA GPU would do, on whatever torch build traces the step.

- `F.scaled_dot_product_attention`: the fused kernel PyTorch picks on the simulated GPU
  (see memlens/cuda/sdpa.py) instead of the host build's math decomposition.
- `torch.version.cuda`, `torch.backends.cuda.is_built()`: scripts that branch on the build see
  a CUDA build.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..cuda import sdpa
from .patcher import Patcher, check_tested

CUDA_VERSION = "13.0"  # what a current PyTorch wheel for Hopper/Blackwell is built with


def apply(patcher: Patcher, tracer) -> None:
    check_tested("torch_cuda_semantics", torch.__version__)
    cc = (tracer.device.major, tracer.device.minor)
    math = F.scaled_dot_product_attention
    chosen = tracer.sdpa_backends  # backend name -> calls, reported in the snapshot

    @functools.wraps(math)
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "cuda":
            return math(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        backend = sdpa.select_backend(query, key, value, attn_mask, dropout_p, is_causal,
                                      enable_gqa, cc)
        name = sdpa.NAMES[backend]
        chosen[name] = chosen.get(name, 0) + 1
        return sdpa.run(backend, query, key, value, attn_mask, dropout_p, is_causal, scale,
                        enable_gqa, math)

    patcher.setattr(F, "scaled_dot_product_attention", scaled_dot_product_attention)
    if torch.version.cuda is None:
        patcher.setattr(torch.version, "cuda", CUDA_VERSION)
        patcher.setattr(torch.backends.cuda, "is_built", lambda: True)
