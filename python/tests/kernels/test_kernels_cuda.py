"""Library memory on a CUDA target: the cuBLAS workspace is a real allocation of the step."""

import pytest
import torch

from support.runs import run_python

from memlens import categories as C
from memlens.engine.tracer import Tracer
from memlens.kernels.cuda import CudaRules

MiB = 1 << 20


def _workspaces(tracer):
    ledger = tracer.ledger
    return [r for r in ledger.records if ledger.ops[r.op] == "cublas_workspace"]



WORKSPACES = """
from memlens.engine.tracer import Tracer
import torch
def workspaces(tracer):
    ledger = tracer.ledger
    return [dict(device=r.device, nbytes=r.nbytes, size=r.size, category=r.category,
                 module=r.module, free_seq=r.free_seq,
                 before=ledger.ops[ledger.records[ledger.events[r.alloc_seq - 1]].op])
            for r in ledger.records if ledger.ops[r.op] == "cublas_workspace"]
"""


@pytest.mark.slow  # traces in a fresh process
def test_first_matmul_takes_one_workspace_that_is_never_freed():
    [ws] = run_python(WORKSPACES + """
with Tracer("h100-80gb") as tracer:
    a = torch.empty(64, 64, device="cuda:0")
    a @ a
    torch.addmm(a, a, a)
    torch.empty(8, 8) @ torch.empty(8, 8)  # a CPU matmul takes none
result = workspaces(tracer)
""")
    assert (ws["device"], ws["nbytes"], ws["size"]) == ("cuda:0", 32 * MiB, 32 * MiB)  # Hopper
    assert ws["category"] == C.OTHER and ws["module"] == -1 and ws["free_seq"] == -1
    assert ws["before"] == "mm"  # right after the output of the first mm, as PyTorch does it


@pytest.mark.slow  # traces in a fresh process
def test_workspace_size_follows_the_card_and_cublas_workspace_config():
    a100 = run_python(WORKSPACES + """
with Tracer("a100-80gb") as tracer:
    a = torch.empty(64, 64, device="cuda:0")
    a @ a
result = workspaces(tracer)
""")
    assert [w["nbytes"] for w in a100] == [8_519_680]  # ':4096:2:16:8'
    configured = run_python(WORKSPACES + """
with Tracer("h100-80gb") as tracer:
    a = torch.empty(1, 64, 64, device="cuda:0")
    torch.bmm(a, a)
result = workspaces(tracer)
""", env={"CUBLAS_WORKSPACE_CONFIG": ":16:8"})
    assert [w["nbytes"] for w in configured] == [16 * 1024 * 8]


def test_cpu_target_has_no_cuda_rules():
    with Tracer("cpu") as tracer:
        torch.empty(8, 8) @ torch.empty(8, 8)
    assert _workspaces(tracer) == []


def test_backward_thread_has_its_own_handle(monkeypatch):
    """Autograd runs CUDA backward on its device thread: a second handle, a second workspace
    (checked on the rule itself: autograd on fake CUDA needs the fake-CUDA shim)."""
    rules = CudaRules()
    out = torch.empty(2, 2, device="meta")
    assert rules._cublas_workspace((), {}, out) == []  # not a CUDA tensor
    with torch._subclasses.fake_tensor.FakeTensorMode():
        out = torch.empty(2, 2, device="cuda:0")
    [main] = rules._cublas_workspace((), {}, out)
    monkeypatch.setattr(torch._C, "_current_autograd_node", lambda: object())
    [backward] = rules._cublas_workspace((), {}, out)
    assert main.key != backward.key and main.nbytes == backward.nbytes == 32 * MiB


def test_flash_attention_backward_holds_its_fp32_accumulators_while_it_runs():
    """mha_bwd's softmax_d and dq_accum (fp32, sequence rounded to 128, head dim to 32), and the
    expanded dk/dv of grouped-query attention."""
    from types import SimpleNamespace

    from memlens.kernels.cuda import _flash_backward

    def t(*shape, size=2):
        return SimpleNamespace(shape=shape, element_size=lambda: size)

    b, h, s, d = 2, 8, 1000, 72
    q, k = t(b, h, s, d), t(b, h, s, d)
    assert _flash_backward((None, q, k), {}, None) == [b * h * 1024 * 4, b * 1024 * h * 96 * 4]
    k_gqa = t(b, 2, s, d)
    assert _flash_backward((None, q, k_gqa), {}, None) == [
        b * h * 1024 * 4, b * 1024 * h * 96 * 4, b * s * h * 72 * 2, b * s * h * 72 * 2]
