"""The engine through its Python API: model-state bytes, attribution, phases, categories."""

import json

import pytest
import torch
import torch.nn as nn

from memlens import Tracer
from memlens import categories as C


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def train(model_fn, optimizer_fn, make_input, iterations=2):
    """Trace `iterations` training steps (the loop asks for one more: tracing stops it)."""
    state = {}
    with Tracer("cpu", iterations=iterations) as tracer:
        model = state["model"] = model_fn()
        opt = state["opt"] = optimizer_fn(model)
        for _ in range(iterations + 1):
            loss = model(make_input()).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return tracer.snapshot(), state["model"], state["opt"]


def phase(snap, name):
    return next(p for p in snap["phases"] if p["name"] == name and p["device"] == "cpu")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.decoder = nn.Linear(128, 32)

    def forward(self, x):
        return self.decoder(self.encoder(x))


BATCH = 16


def test_model_states_equal_the_formula_adamw():
    snap, model, opt = train(Net, lambda m: torch.optim.AdamW(m.parameters()),
                             lambda: torch.randn(BATCH, 64))
    params = list(model.parameters())
    p_bytes = nbytes(params)
    after_fb1 = phase(snap, "forward_backward_iter_1")["categories_after"]
    after_opt1 = phase(snap, "optimizer_step_iter_1")["categories_after"]
    assert after_fb1["parameter"] == p_bytes
    assert after_fb1["gradient"] == p_bytes
    # AdamW: exp_avg and exp_avg_sq per parameter, plus a float32 `step` scalar per parameter
    # (on the CPU for the non-fused implementation).
    state_tensors = [v for s in opt.state.values() for v in s.values()]
    assert nbytes(state_tensors) == 2 * p_bytes + 4 * len(params)
    assert after_opt1["optimizer_state"] == 2 * p_bytes + 4 * len(params)
    assert after_opt1["gradient"] == 0  # zero_grad(set_to_none=True) after the step


def test_model_states_equal_the_formula_sgd_momentum():
    snap, model, _ = train(Net, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                           lambda: torch.randn(BATCH, 64))
    p_bytes = nbytes(model.parameters())
    assert phase(snap, "optimizer_step_iter_1")["categories_after"]["optimizer_state"] == p_bytes


def test_module_attribution_forward_and_backward():
    snap, model, _ = train(Net, lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                           lambda: torch.randn(BATCH, 64))
    mods = {m["fqn"]: m for m in snap["modules"]}
    assert mods["encoder.0"]["parameter_bytes"] == nbytes(model.encoder[0].parameters())
    assert mods["decoder"]["parameter_bytes"] == nbytes(model.decoder.parameters())
    assert mods["encoder"]["parameter_bytes"] == nbytes(model.encoder.parameters())  # inclusive
    # Saved for backward: the ReLU output (by ReLU and by the decoder's matmul) and the decoder
    # output (by the loss's pow). The Linear outputs inside the encoder are freed right away.
    assert mods["encoder.1"]["activation_bytes"] == BATCH * 128 * 4
    assert mods["encoder.0"]["activation_bytes"] == 0
    assert mods["decoder"]["activation_bytes"] == BATCH * 32 * 4
    assert mods[""]["activation_bytes"] == BATCH * (128 + 32) * 4

    # Backward: every allocation made by a module's backward belongs to that module.
    alloc = snap["allocations"]
    names = [m["fqn"] for m in snap["modules"]]
    fb0 = phase(snap, "forward_backward_iter_0")
    ops = snap["ops"]
    backward_ops = {}
    for i, module in enumerate(alloc["module"]):
        if fb0["start_seq"] <= alloc["alloc_seq"][i] < fb0["end_seq"]:
            backward_ops.setdefault(ops[alloc["op"][i]], set()).add(names[module] if module >= 0
                                                                     else None)
    assert backward_ops["threshold_backward"] == {"encoder.1"}
    assert backward_ops["mm"] == {"decoder", "encoder.0"}  # weight/input gradients
    grad_modules = {names[alloc["module"][i]] for i, c in enumerate(alloc["category"])
                    if c == C.GRADIENT}
    assert grad_modules == {"encoder.0", "decoder"}


def test_phases_show_optimizer_state_and_a_higher_second_iteration():
    snap, _, _ = train(Net, lambda m: torch.optim.AdamW(m.parameters()),
                       lambda: torch.randn(BATCH, 64))
    names = [p["name"] for p in snap["phases"]]
    assert names == ["setup_model_and_optimizer", "forward_backward_iter_0",
                     "optimizer_step_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    step0 = phase(snap, "optimizer_step_iter_0")
    assert step0["categories_before"]["optimizer_state"] == 0
    assert step0["categories_after"]["optimizer_state"] > 0
    assert phase(snap, "forward_backward_iter_1")["peak_bytes"] > phase(
        snap, "forward_backward_iter_0")["peak_bytes"]
    assert snap["summary"]["peak_phase"] in ("optimizer_step_iter_0", "forward_backward_iter_1",
                                             "optimizer_step_iter_1")


def test_every_byte_has_one_category():
    snap, _, _ = train(Net, lambda m: torch.optim.AdamW(m.parameters()),
                       lambda: torch.randn(BATCH, 64))
    s = snap["summary"]
    assert sum(s["categories_at_peak"].values()) == s["peak_bytes"]
    assert sum(t["bytes"] for t in snap["tensors"]) == s["peak_bytes"]
    for p in snap["phases"]:
        assert sum(p["categories_after"].values()) == p["current_after_bytes"]
        assert sum(p["categories_at_peak"].values()) == p["peak_bytes"]


def test_the_tensor_that_sets_the_peak_is_in_the_peak_set():
    snap, _, _ = train(Net, lambda m: torch.optim.AdamW(m.parameters()),
                       lambda: torch.randn(BATCH, 64))
    peak = snap["tensors"][snap["summary"]["peak_tensor"]]
    assert peak["id"] == snap["allocations"]["alloc_seq"].index(snap["summary"]["peak_seq"])


def test_patches_and_hooks_are_undone():
    originals = (torch.utils.swap_tensors, torch.get_rng_state)
    from torch.nn.modules import module as m

    hooks_before = (len(m._global_forward_pre_hooks), len(m._global_forward_hooks),
                    len(m._global_parameter_registration_hooks))
    train(Net, lambda mod: torch.optim.AdamW(mod.parameters()), lambda: torch.randn(BATCH, 64))
    assert (torch.utils.swap_tensors, torch.get_rng_state) == originals
    assert (len(m._global_forward_pre_hooks), len(m._global_forward_hooks),
            len(m._global_parameter_registration_hooks)) == hooks_before
    assert not isinstance(torch.empty(1), torch._subclasses.FakeTensor)


@pytest.mark.slow  # traces in a fresh process
def test_cuda_target_counts_whole_allocator_blocks(memlens, tmp_path):
    """On the CPU each allocation costs what it asks for; on a CUDA target it costs the block the
    caching allocator hands out: 512 B granularity in the small pool, and a large request whose
    leftover is at most 1 MiB keeps the whole 20 MiB-pool block (REFERENCES §3)."""
    script = tmp_path / "alloc.py"
    script.write_text("import torch\n"
                      "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                      "a = torch.empty(1000, dtype=torch.uint8, device=dev)\n"
                      "b = torch.empty(5 * 2**20 + 1, dtype=torch.uint8, device=dev)\n"
                      "c = torch.empty(25_000_000, dtype=torch.uint8, device=dev)\n")
    sizes = {}
    for device in ("cpu", "h100-80gb"):
        out = memlens("run", "--device", device, "--json", "--no-snapshot", "--", str(script))
        assert out.returncode == 0, out.stderr
        sizes[device] = json.loads(out.stdout)["peak_bytes"]
    assert sizes["cpu"] == 1000 + 5 * 2**20 + 1 + 25_000_000
    assert sizes["h100-80gb"] == 1024 + 5_243_392 + 25_165_824


def test_cyclic_garbage_is_collected_before_the_trace_ends():
    """What the trace ends with is what the workload still reaches: a tensor in a reference
    cycle the step dropped is freed at the end, however long ago the collector last ran."""
    import gc

    class Cycle:
        def __init__(self, tensor):
            self.tensor, self.me = tensor, self

    was_enabled = gc.isenabled()
    gc.disable()  # the collector's timing is what made two runs differ
    try:
        with Tracer("cpu") as tracer:
            kept = torch.empty(256, 1024)  # 1 MiB, still referenced at the end
            Cycle(torch.empty(512, 1024))  # 2 MiB, garbage in a cycle
            tracer.mark_end()
    finally:
        if was_enabled:
            gc.enable()
    assert tracer.snapshot()["summary"]["final_bytes"] == kept.numel() * 4
