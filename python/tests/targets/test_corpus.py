"""The judging corpus of issue 20: training scripts in the styles people copy
(scripts/corpus/, one style each, see their docstrings), each run unmodified by `memlens run`
on the default target (H100), with its model states checked against a count made here.

The count: the test process builds each script's model on the meta device (the scripts keep the
model in `build_model()`/`build_models()` behind `if __name__ == "__main__"`, as pytorch/examples
do) and sums `numel * element_size` of its parameters. nanoGPT's script is module-level code, so
its count is a closed formula below. Model states are compared in requested bytes (the
snapshot's allocation stream): the bytes of a block the caching allocator hands out also
depend on what it has cached (a 2,048,000 B weight may get a whole 2 MiB block when the rest
is too small to split), which is the allocator model's business, tested elsewhere.
"""

import json
from dataclasses import dataclass

import pytest

from support.paths import TESTS
from support.runs import run_memlens, run_python

pytestmark = pytest.mark.slow  # traces in fresh processes

CORPUS = TESTS / "scripts" / "corpus"
SCRIPTS = sorted(p.stem for p in CORPUS.glob("*.py"))
TARGET = "cuda:0"


def parameter_bytes(script: str) -> list[int]:
    """Device bytes of the parameters of each of the script's models, built on the meta
    device, in a fresh interpreter (run_python): torch imported into the test process would
    come before the fake-CUDA shim that later in-process tests load first."""
    return run_python(f"""
        import runpy
        import torch
        namespace = runpy.run_path({str(CORPUS / f"{script}.py")!r}, run_name="corpus_count")
        with torch.device("meta"):
            if "build_models" in namespace:
                models = namespace["build_models"]()
            else:
                models = (namespace["build_model"](),)
        # `parameters()` yields a tied weight once
        result = [sum(p.numel() * p.element_size() for p in m.parameters()) for m in models]
    """)


def nanogpt_parameter_bytes() -> int:
    # n_embd 128, 2 layers, vocab 512, block 128, lm_head tied to wte:
    #   wte 512*128 = 65536; wpe 128*128 = 16384; ln_f 2*128 = 256; per block: ln_1 + ln_2
    #   4*128 = 512, c_attn 128*384 + 384 = 49536, c_proj 128*128 + 128 = 16512, mlp
    #   128*512 + 512 = 66048 and 512*128 + 128 = 65664 -> 198272; two blocks 396544.
    #   65536 + 16384 + 256 + 396544 = 478720 fp32 parameters (the script prints 0.48M).
    return [478720 * 4]


@dataclass(frozen=True)
class Expect:
    state_per_param_byte: int  # optimizer state bytes per parameter byte
    parameter_copies: int = 1  # an EMA copy of the weights is a second set of parameters
    activation_bytes: int | None = None  # the most activation bytes alive, when derived by hand
    first_step_models: tuple[int, ...] | None = None  # models with gradients at the first step; all if None


ADAM = Expect(2)  # AdamW/Adam/Adadelta: two state tensors like each parameter (8 B/param fp32)
MOMENTUM = Expect(1)  # SGD with momentum: one buffer like each parameter (4 B/param fp32)

EXPECT = {
    # The first step is the discriminator's: the generator has no gradient yet (D saw
    # `fake.detach()`). Generator first in build_models().
    "dcgan": Expect(2, first_step_models=(1,)),
    "hf_bert_classifier": ADAM,
    "hf_gpt2": ADAM,
    "hf_llama_bf16": ADAM,  # bf16 parameters, so bf16 state: 4 B/param
    "hf_mistral_accum": ADAM,
    "hf_t5_seq2seq": ADAM,
    "imagenet_resnet": MOMENTUM,
    "iterable_tokens": ADAM,
    "memmap_dataset": MOMENTUM,
    "mnist_cnn": ADAM,  # Adadelta: square_avg and acc_delta
    "nanogpt_memmap": ADAM,
    "timm_style_ema": Expect(2, parameter_copies=2),
    # Batch 64, 256 -> 1024 -> ReLU -> 1024 -> ReLU -> 10, cross_entropy. Saved for backward:
    # each ReLU's output (64*1024*4 = 262144 B, also the next Linear's saved input; the
    # pre-ReLU output is freed), log_softmax's output (64*10*4 = 2560 B) and nll_loss's
    # total_weight (a 4 B scalar, one 512 B block). The first Linear's saved input is the
    # batch (category input); weights are parameters. 2*262144 + 2560 + 512 = 527360.
    "trainer_class": Expect(2, activation_bytes=2 * 262144 + 2560 + 512),
    # Batch 32. The most is reached in the second forward at the decoder's sigmoid: this
    # iteration's saved fc1 ReLU output (32*400*4 = 51200 B), mu (saved by mu.pow(2)) 2560,
    # std = exp(0.5*logvar) (saved by exp and by eps*std) 2560, eps 2560, z (fc3's input)
    # 2560, the fc3 ReLU output 51200 and the sigmoid output (also BCE's input) 32*784*4 =
    # 100352 -> 212992; plus the previous iteration's `recon_batch` (100352) and `mu` (2560),
    # which the script's variables hold until `model(data)` returns -> 212992 + 102912.
    "vae": Expect(2, activation_bytes=212992 + 102912),
    "vit_ema": Expect(2, parameter_copies=2),  # AveragedModel deep-copies the model
    "word_lm_transformer": MOMENTUM,
}


def trace(script: str, tmp_path):
    snapshot = tmp_path / "snapshot.json"
    out = _run(script, snapshot)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), json.loads(snapshot.read_text())


def _run(script, snapshot):
    # the phase table of the snapshot holds the categories at each phase's start
    return run_memlens("run", "--json", "--snapshot", str(snapshot), "--",
                       str(CORPUS / f"{script}.py"), cwd=str(snapshot.parent))


def requested_alive(snapshot: dict, category: str, seq: int) -> int:
    """Requested bytes of `category` alive on the target right before event `seq`."""
    a = snapshot["allocations"]
    device = a["devices"].index(TARGET)
    cat = list(snapshot["summary"]["categories_at_peak"]).index(category)
    return sum(a["requested_bytes"][i] for i in range(len(a["alloc_seq"]))
               if a["device"][i] == device and a["category"][i] == cat and a["alloc_seq"][i] < seq
               and (a["free_seq"][i] == -1 or a["free_seq"][i] >= seq))


def test_every_script_has_expectations():
    assert sorted(EXPECT) == SCRIPTS
    assert len(SCRIPTS) >= 14


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_traces_to_a_peak_with_its_model_states(script, tmp_path):
    expect = EXPECT[script]
    result, snapshot = trace(script, tmp_path)
    models = nanogpt_parameter_bytes() if script == "nanogpt_memmap" else parameter_bytes(script)
    params = sum(models)
    assert result["peak_bytes"] > 0
    assert result["device_key"] == TARGET
    phases = [p for p in snapshot["phases"] if p["device"] == TARGET]
    names = [p["name"] for p in phases]
    assert "optimizer_step_iter_1" in names, names  # two iterations traced

    # Parameters never change size: those alive at the peak are the model's (and an EMA copy's).
    at_peak = sum(t["requested_bytes"] for t in snapshot["tensors"]
                  if t["category"] == "parameter" and snapshot["phases"][t["phase"]]["device"] == TARGET)
    assert at_peak == expect.parameter_copies * params

    # Right before the first optimizer step every parameter has its gradient (set_to_none
    # zeroing leaves none from earlier), and nothing else counts as one.
    first_step = next(p for p in phases if p["name"].startswith("optimizer_step"))
    assert requested_alive(snapshot, "gradient", first_step["start_seq"]) == sum(
        models if expect.first_step_models is None else [models[i] for i in expect.first_step_models])

    # Optimizer state is made in the first step and kept to the end of the trace.
    end = phases[-1]["end_seq"]
    assert requested_alive(snapshot, "optimizer_state", end) == expect.state_per_param_byte * params

    if expect.activation_bytes is not None:
        # blocks of 512 B: every tensor of the derivation is a multiple of 512 B
        assert result["category_peaks"]["activation"] == expect.activation_bytes
