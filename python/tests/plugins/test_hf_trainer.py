"""Hugging Face Trainer and accelerate training scripts trace unmodified, on one GPU and as a rank
of a 4-GPU job (the scripts are in scripts/hf/; their models are built from configs).

Model-state bytes are exact (requested bytes, read from the snapshot's allocation stream when an
optimizer step begins): parameters and gradients 4 B per parameter (fp32 master weights; bf16 is
autocast), fused AdamW's exp_avg and exp_avg_sq 8 B per parameter plus one fp32 `step` scalar
(4 B) per parameter tensor, and on a DDP rank a second copy of the gradients in DDP's buckets.
"""

import json

import pytest
import torch

from support.paths import TESTS
from support.runs import run_memlens
from support.ranks import _rows, model_state_bytes

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts" / "hf"


def trace(tmp_path, script: str, *args: str, iterations: int = 2, rank: int | None = None,
          env: dict | None = None):
    """(JSON summary, snapshot) of `memlens run` of a script of scripts/hf/."""
    snap = tmp_path / "snap.json"
    job = ("--world-size", "4", "--rank", str(rank)) if rank is not None else ()
    out = run_memlens("run", "--json", "--progress", "none", "--iterations", str(iterations),
                      "--snapshot", str(snap), *job, "--", str(SCRIPTS / script), *args,
                      cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout), json.loads(snap.read_text())


def phase_names(snap: dict) -> list[str]:
    return [p["name"] for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]


def forwards_per_phase(snap: dict, embeddings_per_forward: int) -> dict[str, int]:
    """Model forwards in each phase, counted by their embedding lookups (the output of each
    `aten.embedding` is one allocation; checkpointing recomputes decoder layers, not those)."""
    op = snap["ops"].index("embedding")
    out = {}
    for p in snap["phases"]:
        if p["device"] != snap["meta"]["device_key"]:
            continue
        n = sum(1 for r in _rows(snap) if r["op"] == op
                and p["start_seq"] <= r["alloc_seq"] < p["end_seq"])
        out[p["name"]] = n // embeddings_per_forward
    return out


def parameter_tensors(model_class: str, config_class: str, **config) -> tuple[int, int]:
    """(parameters, parameter tensors) of the model the script builds, built on the meta device
    here (no memory) from the same config."""
    import transformers

    with torch.device("meta"):
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    params = list(model.parameters())  # shared (tied) parameters once
    return sum(p.numel() for p in params), len(params)


# Llama of trainer_llama.py: embeddings 1000 x 128 and an untied head of the same size; per layer
# q and o 128 x 128, k and v 128 x 64 (2 key/value heads of 32), gate, up and down 128 x 256,
# two norms of 128; a final norm: 2 x 128,000 + 2 x 147,712 + 128 = 551,552 parameters in 21
# tensors.
LLAMA = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             tie_word_embeddings=False)
# GPT-2 of accelerate_loop.py (lm_head tied to the token embedding).
GPT2 = dict(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2, n_head=4)
BERT = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=512, max_position_embeddings=64, num_labels=3)


def assert_model_state(snap: dict, n: int, tensors: int, ddp: bool = False) -> None:
    assert model_state_bytes(snap) == {
        "parameter": 4 * n, "gradient": (8 if ddp else 4) * n,
        "optimizer_state": 8 * n + 4 * tensors}


def test_trainer_llama_follows_the_trainers_steps_and_saves_checkpoints(tmp_path):
    n, tensors = parameter_tensors("LlamaForCausalLM", "LlamaConfig", **LLAMA)
    assert (n, tensors) == (551_552, 21)
    # push_to_hub=True, offline: the repository it would create at the start and the
    # checkpoints it would upload are skipped, not attempted.
    summary, snap = trace(tmp_path, "trainer_llama.py", str(tmp_path / "out"), "--save",
                          "--push-to-hub", iterations=3, env={"HF_HUB_OFFLINE": "1"})
    # One iteration per optimizer step (2 micro-batches each); the evaluation after each step
    # (eval_steps=1: 8 samples in 2 batches of 4) is a phase of its own.
    assert phase_names(snap) == [
        "setup_model_and_optimizer", "forward_backward_iter_0", "optimizer_step_iter_0",
        "evaluate_after_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1",
        "evaluate_after_iter_1", "forward_backward_iter_2", "optimizer_step_iter_2"]
    forwards = forwards_per_phase(snap, 1)
    assert [forwards[f"forward_backward_iter_{i}"] for i in range(3)] == [2, 2, 2]
    assert forwards["evaluate_after_iter_0"] == forwards["evaluate_after_iter_1"] == 2
    assert_model_state(snap, n, tensors)
    # Checkpoints of steps 1 and 2 were saved as on a GPU (the trace stops after step 3's
    # optimizer step: safetensors left the 21 fake tensors' bytes out of each), into the
    # trace's own folder: nothing in output_dir that a real run would resume from.
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("checkpoint-*"))
    assert any(note.startswith("the Trainer's checkpoints and saved model went into a folder "
                               f"of the trace's own, not into {tmp_path / 'out'}")
               for note in summary["notes"])
    assert sum("fake tensors left out" in note for note in summary["notes"]) == 2
    assert "push_to_hub: the Trainer created no Hub repository and uploaded nothing (a traced " \
        "model holds no data)" in summary["notes"]
    # The evaluation loss went through numpy: a placeholder noted at its line.
    assert any(p["op"] == "numpy" and p["file"].endswith("trainer_pt_utils.py")
               for p in summary["placeholders"])


def test_trainer_runs_to_its_end_when_it_has_fewer_steps_than_asked(tmp_path):
    # max_steps=2 and --iterations 5: train() returns its metrics (read with .item()), the
    # script evaluates once more and ends; 2 iterations were traced.
    summary, snap = trace(tmp_path, "trainer_llama.py", str(tmp_path / "out"), "--max-steps",
                          "2", iterations=5)
    names = phase_names(snap)
    assert [p for p in names if p.startswith("forward_backward")] == [
        "forward_backward_iter_0", "forward_backward_iter_1"]
    assert names[-1] == "evaluate_after_iter_1"  # the script's own trainer.evaluate()
    assert summary["phases"][0]["name"] == "setup_model_and_optimizer"


def test_trainer_on_a_rank_of_a_4_gpu_job_builds_ddp(tmp_path):
    n, tensors = parameter_tensors("LlamaForCausalLM", "LlamaConfig", **LLAMA)
    summary, snap = trace(tmp_path, "trainer_llama.py", str(tmp_path / "out"), rank=1)
    assert (summary["world_size"], summary["rank"], summary["device_key"]) == (4, 1, "cuda:1")
    assert [p for p in phase_names(snap) if p.startswith("optimizer_step")] == [
        "optimizer_step_iter_0", "optimizer_step_iter_1"]
    assert_model_state(snap, n, tensors, ddp=True)


def test_bert_classification_with_metrics_and_default_saving(tmp_path):
    n, tensors = parameter_tensors("BertForSequenceClassification", "BertConfig", **BERT)
    summary, snap = trace(tmp_path, "trainer_bert_classification.py", str(tmp_path / "out"),
                          "--save-steps", "2", iterations=3)
    # 4 micro-batches per step; evaluation every 2 steps (16 samples in 2 batches of 8),
    # with compute_metrics on the gathered logits (numpy placeholders).
    forwards = forwards_per_phase(snap, 3)  # word, position and token-type embeddings
    assert phase_names(snap)[5] == "evaluate_after_iter_1"
    assert [forwards[f"forward_backward_iter_{i}"] for i in range(3)] == [4, 4, 4]
    assert forwards["evaluate_after_iter_1"] == 2
    assert_model_state(snap, n, tensors)
    assert not (tmp_path / "out" / "checkpoint-2").exists()  # saved in the trace's own folder


@pytest.mark.parametrize("rank", [None, 1])
def test_accelerate_loop(tmp_path, rank):
    n, tensors = parameter_tensors("GPT2LMHeadModel", "GPT2Config", **GPT2)
    # 1000 x 128 + 64 x 128 embeddings; per layer 2 norms (2 x 256), c_attn 128 x 384 + 384,
    # attention c_proj 128 x 128 + 128, c_fc 128 x 512 + 512, c_proj 512 x 128 + 128; ln_f 256.
    assert (n, tensors) == (532_992, 28)
    summary, snap = trace(tmp_path, "accelerate_loop.py", iterations=3, rank=rank)
    # accelerate's optimizer wrapper steps the optimizer once per 2 micro-batches.
    forwards = forwards_per_phase(snap, 2)  # token and position embeddings
    assert [p for p in phase_names(snap) if p.startswith("forward_backward")] == [
        f"forward_backward_iter_{i}" for i in range(3)]
    assert [forwards[f"forward_backward_iter_{i}"] for i in range(3)] == [2, 2, 2]
    assert_model_state(snap, n, tensors, ddp=rank is not None)
    if rank is not None:
        assert summary["device_key"] == "cuda:1"
        assert any("RNG states are not broadcast" in note for note in summary["notes"])
