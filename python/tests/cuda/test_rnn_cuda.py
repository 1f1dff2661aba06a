"""nn.GRU on the simulated GPU of a CPU-only build: ATen's fused GRU cell gets a Meta kernel for
the trace (patches/torch_cuda_semantics.py), removed after it."""

import pytest

from support.runs import run_python

pytestmark = pytest.mark.slow  # traces in fresh processes


def test_a_gru_trains_on_the_simulated_gpu_and_the_kernel_goes_with_the_trace():
    result = run_python("""
        import torch
        from memlens import Tracer
        op = torch.ops.aten._thnn_fused_gru_cell.default.name()
        has_meta = lambda: torch._C._dispatch_has_kernel_for_dispatch_key(op, "Meta")
        before = has_meta()
        with Tracer("h100-80gb", iterations=1) as tracer:
            gru = torch.nn.GRU(32, 64, batch_first=True).cuda()
            out, h = gru(torch.randn(4, 10, 32, device="cuda"))
            inside = has_meta()
            out.sum().backward()
            grads = sum(p.grad.numel() for p in gru.parameters())
        result = [before, inside, has_meta(), list(out.shape), grads]
    """)
    # GRU(32, 64): weight_ih 192x32, weight_hh 192x64, two biases of 192 -> 18,816 gradients
    assert result == [False, True, False, [4, 10, 64], 192 * 32 + 192 * 64 + 2 * 192]
