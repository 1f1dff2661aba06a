"""Library memory on a CUDA target: the cuBLAS workspace is a real allocation of the step."""

import torch

from memlens import categories as C
from memlens.tracer import Tracer
from memlens.workspaces_cuda import CudaRules

MiB = 1 << 20


def _workspaces(tracer):
    ledger = tracer.ledger
    return [r for r in ledger.records if ledger.ops[r.op] == "cublas_workspace"]


def test_first_matmul_takes_one_workspace_that_is_never_freed():
    with Tracer("h100-80gb") as tracer:
        a = torch.empty(64, 64, device="cuda:0")
        a @ a
        torch.addmm(a, a, a)
        torch.empty(8, 8) @ torch.empty(8, 8)  # a CPU matmul takes none
    [ws] = _workspaces(tracer)
    ledger = tracer.ledger
    assert (ws.device, ws.nbytes, ws.size) == ("cuda:0", 32 * MiB, 32 * MiB)  # Hopper: 32 MiB
    assert ws.category == C.OTHER and ws.module == -1 and ws.free_seq == -1
    # Right after the output of the first mm, as PyTorch allocates them.
    assert ledger.ops[ledger.records[ledger.events[ws.alloc_seq - 1]].op] == "mm"


def test_workspace_size_follows_the_card_and_cublas_workspace_config(monkeypatch):
    with Tracer("a100-80gb") as tracer:
        a = torch.empty(64, 64, device="cuda:0")
        a @ a
    assert [w.nbytes for w in _workspaces(tracer)] == [8_519_680]  # ':4096:2:16:8'
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with Tracer("h100-80gb") as tracer:
        a = torch.empty(1, 64, 64, device="cuda:0")
        torch.bmm(a, a)
    assert [w.nbytes for w in _workspaces(tracer)] == [16 * 1024 * 8]


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
