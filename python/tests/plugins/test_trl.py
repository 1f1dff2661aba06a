"""TRL's SFTTrainer traced unmodified (scripts/trl/sft_llama.py): a tiny Llama from its config,
or loaded from a local checkpoint onto the process's GPU with `device_map` (transformers 5
copies the weights in worker threads: plugins/hf/loading.py), or QLoRA (BitsAndBytesConfig NF4
with double quantization, a LoRA adapter, paged_adamw_8bit), on one GPU and as rank 1 of 4
(DDP); TRL's own `sft` command under its shipped ZeRO-3 accelerate configuration, as rank 1
of 8, and its `dpo` command (a frozen reference model beside the policy). TRL's hand-written
Triton kernels (its chunked log-prob of the fused LM head) are not run on fake tensors, and a
note says so (plugins/triton). Model state is read when the second optimizer step begins.
"""

import json
import math
from importlib.util import find_spec
from pathlib import Path

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "trl" / "sft_llama.py"
# The script's Llama: vocabulary 256, hidden 128, 2 layers, 4 heads of 32 with 2 key/value heads.
H, KV, F, LAYERS, VOCAB = 128, 64, 256, 2, 256
PROJECTIONS = [(H, H), (H, KV), (H, KV), (H, H), (H, F), (H, F), (F, H)]  # (in, out)
NORMS = 2 * LAYERS + 1
# Embeddings and untied head, the projections' weights, the norms: 361,088 parameters in 21
# tensors.
N = 2 * VOCAB * H + LAYERS * sum(i * o for i, o in PROJECTIONS) + NORMS * H
TENSORS = 2 + LAYERS * (len(PROJECTIONS) + 2) + 1


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The script's Llama saved as a local checkpoint (real tensors, this process)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("checkpoint")
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=F,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def sft(tmp_path_factory, name: str, *args: str, job: tuple[str, ...] = ()) -> dict:
    tmp = tmp_path_factory.mktemp(name)
    snap = tmp / "snap.json"
    out = run_memlens("run", "--progress", "none", *job, "--snapshot", str(snap), "--",
                      str(SCRIPT), "--output_dir", str(tmp / "out"), *args, cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


@pytest.fixture(scope="module")
def from_config(tmp_path_factory):
    return sft(tmp_path_factory, "from_config")


@pytest.fixture(scope="module")
def device_map(tmp_path_factory, checkpoint):
    return sft(tmp_path_factory, "device_map", "--model", str(checkpoint))


@pytest.fixture(scope="module")
def qlora(tmp_path_factory, checkpoint):
    return sft(tmp_path_factory, "qlora", "--model", str(checkpoint), "--load-in-4bit", "--peft",
               "--optim", "paged_adamw_8bit")


@pytest.fixture(scope="module")
def qlora_rank1(tmp_path_factory, checkpoint):
    """The QLoRA run as rank 1 of a 4-GPU job (the Trainer wraps the model in DDP)."""
    return sft(tmp_path_factory, "qlora_rank1", "--model", str(checkpoint), "--load-in-4bit",
               "--peft", "--optim", "paged_adamw_8bit", job=("--world-size", "4", "--rank", "1"))


def test_sft_from_config_trains_fp32_weights_with_fused_adamw(from_config):
    assert (N, TENSORS) == (361088, 21)
    # bf16=True is autocast over fp32 weights; fused AdamW: exp_avg and exp_avg_sq (fp32) and
    # a 4-byte step per tensor.
    assert model_state_bytes(from_config) == {"parameter": 4 * N, "gradient": 4 * N,
                                              "optimizer_state": 8 * N + 4 * TENSORS}


def test_trls_triton_kernels_are_noted_not_run(from_config):
    notes = [n for n in from_config["meta"]["notes"] if n.startswith("triton:")]
    assert [n.split()[2] for n in notes] == ["trl.kernels.chunked_logprob._forward_kernel",
                                             "trl.kernels.chunked_logprob._backward_kernel"]
    assert all("allocates no device memory of its own" in n for n in notes)


def test_weights_loaded_by_worker_threads_are_booked_on_the_gpu(device_map):
    # dtype=bfloat16 weights trained as they are: 2 B per parameter, gradient and each moment.
    assert model_state_bytes(device_map) == {"parameter": 2 * N, "gradient": 2 * N,
                                             "optimizer_state": 4 * N + 4 * TENSORS}


def qlora_base_and_lora() -> tuple[int, int]:
    """Bytes of the quantized base model, and elements of the LoRA adapter."""
    def quantized(n: int) -> int:  # NF4 + double quantization, as in test_bitsandbytes.py
        return n // 2 + n // 64 + math.ceil(n / 64 / 256) * 4 + 4 + 16 * 4 + 256 * 4

    weights = [i * o for i, o in PROJECTIONS] * LAYERS
    # LoRA r=8 on q_proj (128 -> 128) and v_proj (128 -> 64), A: 8 x in, B: out x 8, in bf16
    # as TRL trains it with bf16=True.
    lora = LAYERS * ((8 * H + H * 8) + (8 * H + KV * 8))
    assert lora == 7168
    # The head, embeddings and norms stay bf16 (the head is not quantized).
    return sum(quantized(n) for n in weights) + 2 * VOCAB * H * 2 + NORMS * H * 2, lora


def test_qlora_from_pretrained_with_bitsandbytes_config(qlora):
    base, lora = qlora_base_and_lora()
    # paged_adamw_8bit: every LoRA tensor is under 4,096 elements, so two fp32 states each
    # (Optimizer2State.init_state's min_8bit_size), none of them paged (under 1e5).
    assert model_state_bytes(qlora) == {"parameter": base + 2 * lora, "gradient": 2 * lora,
                                        "optimizer_state": 8 * lora}


def test_qlora_on_a_rank_of_a_4_gpu_job_adds_ddps_bucket_of_the_adapter(qlora_rank1):
    base, lora = qlora_base_and_lora()
    assert qlora_rank1["meta"]["device_key"] == "cuda:1"  # device_map: the process's GPU
    # The same states as on one GPU, and DDP's bucket: a flat bf16 copy of the gradients of
    # the parameters that train (the adapter; the frozen 4-bit base has none).
    assert model_state_bytes(qlora_rank1) == {"parameter": base + 2 * lora,
                                              "gradient": 2 * 2 * lora,
                                              "optimizer_state": 8 * lora}


@pytest.fixture(scope="module")
def cli_workspace(tmp_path_factory, checkpoint):
    """What TRL's own commands are given here: the checkpoint above with a word-level tokenizer
    saved beside it (model/), a local JSON-lines dataset of texts (data/) and one of preference
    triples, prompt / chosen / rejected (preferences/)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tmp = tmp_path_factory.mktemp("trl_cli")
    model = tmp / "model"
    model.mkdir()
    for f in Path(checkpoint).iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    words = [f"w{i}" for i in range(200)]
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3,
             **{w: i + 4 for i, w in enumerate(words)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", unk_token="<unk>").save_pretrained(model)

    def text(i: int, step: int, n: int) -> str:
        return " ".join(words[(step * i + j) % 200] for j in range(n))

    for name, rows in (("data", [{"text": text(i, 7, 24)} for i in range(64)]),
                       ("preferences", [{"prompt": text(i, 7, 16), "chosen": text(i, 3, 20),
                                         "rejected": text(i, 5, 12)} for i in range(64)])):
        (tmp / name).mkdir()
        (tmp / name / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp


def trl_command(workspace, script: str, dataset: str, options: tuple[str, ...] = (),
                launcher: tuple[str, ...] = ()) -> dict:
    """`python -m trl.scripts.<script>` (what the `trl` command runs) on the workspace's model,
    3 steps of 4 sequences of at most 32 tokens; `options`: memlens run's, `launcher`: what
    starts the script (accelerate launch ...)."""
    snap = workspace / f"{script}-{len(launcher)}.json"
    out = run_memlens("run", *options, "--progress", "none", "--snapshot", str(snap), "--",
                      *launcher, "-m", f"trl.scripts.{script}", "--model_name_or_path", "model",
                      "--dataset_name", dataset, "--output_dir", f"out-{script}",
                      "--max_steps", "3", "--per_device_train_batch_size", "4",
                      "--max_length", "32", "--report_to", "none", cwd=workspace)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


@pytest.fixture(scope="module")
def trl_sft_zero3_rank1(cli_workspace):
    """TRL's `sft` under `accelerate launch` with the ZeRO-3 configuration TRL ships
    (trl/accelerate_configs/zero3.yaml: 8 processes, bf16, zero3_init), rank 1."""
    config = Path(find_spec("trl").origin).parent / "accelerate_configs" / "zero3.yaml"
    return trl_command(cli_workspace, "sft", "data", options=("--rank", "1"),
                       launcher=("accelerate", "launch", "--config_file", str(config)))


def test_trls_dpo_command_trains_the_policy_beside_a_frozen_reference(cli_workspace):
    """TRL's `dpo` on one GPU: the policy (fp32, as the checkpoint is) with its gradients and
    fused AdamW's states (two fp32 moments and a 4-byte step per tensor), and the reference
    model, a second fp32 copy of the checkpoint that trains nothing."""
    snap = trl_command(cli_workspace, "dpo", "preferences")
    assert model_state_bytes(snap) == {"parameter": 2 * 4 * N, "gradient": 4 * N,
                                       "optimizer_state": 8 * N + 4 * TENSORS}


def test_trls_sft_command_with_its_zero3_config_partitions_everything(trl_sft_zero3_rank1):
    """ZeRO-3 over 8 ranks, bf16, the Trainer's fused AdamW as DeepSpeed's client optimizer:
    each parameter padded to a multiple of 8 (all are already) and split 8 ways, so a rank
    holds Ψ/8 = 45,136 elements: the norms' 640 / 8 = 80 in the group without weight decay,
    the other 45,056 in the decayed group. Parameters: the bf16 partitions (2Ψ/N). Optimizer
    state: the fp32 master partitions and AdamW's two moments (12Ψ/N), and a 4-byte step
    counter per group (fused AdamW keeps it on the GPU). Gradients when the inner optimizer's
    second step begins: DeepSpeed's reduce bucket (its default 5e8 elements, bf16), the flat
    buffer of bf16 gradient partitions (2Ψ/N) and the fp32 gradient of the group stepped first
    (the decayed one; stage3.py prepares each group's fp32 gradient when it steps it)."""
    world = 8
    part, decayed = N // world, (N - NORMS * H) // world
    assert (part, decayed) == (45_136, 45_056)
    snap = trl_sft_zero3_rank1
    assert snap["meta"]["device_key"] == "cuda:1"
    assert model_state_bytes(snap) == {
        "parameter": 2 * part, "gradient": 2 * 500_000_000 + 2 * part + 4 * decayed,
        "optimizer_state": 12 * part + 2 * 4}
