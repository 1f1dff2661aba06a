"""A checkpoint loaded by path (`from_pretrained(DIR)`, safetensors) in a trace is fake tensors of
the stored shapes and dtypes: only its header is read (plugins/hf/fake_checkpoint.py).

The checkpoint here is a Llama of 232,269,824 parameters in bf16 whose data region is a hole
(a sparse file: 464.5 MB long, no disk blocks). scripts/hf/load_checkpoint.py loads it with
`dtype=float32`, as a full fine-tune does, and moves it to the GPU: read for real, the
conversion alone is 927 MB of host memory on top of the process's own (~0.5 GB: torch and
transformers imported); fake, nothing.
"""

import json
import struct

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # a trace in a fresh process

SCRIPT = TESTS / "scripts" / "hf" / "load_checkpoint.py"
VOCAB, H, F, LAYERS = 32_000, 2048, 5504, 2


def shapes() -> dict[str, list[int]]:
    out = {"model.embed_tokens.weight": [VOCAB, H], "model.norm.weight": [H],
           "lm_head.weight": [VOCAB, H]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[p + f"self_attn.{name}.weight"] = [H, H]
        out.update({p + "mlp.gate_proj.weight": [F, H], p + "mlp.up_proj.weight": [F, H],
                    p + "mlp.down_proj.weight": [H, F], p + "input_layernorm.weight": [H],
                    p + "post_attention_layernorm.weight": [H]})
    return out


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from transformers import LlamaConfig

    tmp = tmp_path_factory.mktemp("checkpoint")
    ckpt = tmp / "llama"
    LlamaConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=F, num_hidden_layers=LAYERS,
                num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=256,
                tie_word_embeddings=False).save_pretrained(ckpt)
    header, offset = {}, 0
    for name, shape in shapes().items():
        size = 2 * numel(shape)  # bf16
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(ckpt / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)  # the data: a hole
    out = run_memlens("run", "--no-snapshot", "--progress", "none", "--", str(SCRIPT),
                      str(ckpt), "--resave", str(tmp / "resaved"), cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return dict(line.split() for line in out.stdout.splitlines()
                if line.startswith(("parameters ", "max_rss_mib ", "reloaded ")))


def test_the_model_has_the_checkpoints_parameters(loaded):
    # Per layer 4 x 2048^2 + 3 x 2048 x 5504 + 2 x 2048; embeddings and head 32,000 x 2048.
    layer = 4 * H * H + 3 * H * F + 2 * H
    assert sum(numel(s) for s in shapes().values()) == 2 * VOCAB * H + LAYERS * layer + H
    assert int(loaded["parameters"]) == 232_269_824


def test_the_checkpoint_is_not_read_into_host_memory(loaded):
    # Read and converted to fp32 for real, 232,269,824 x 4 B = 886 MiB more than the process's
    # own ~500 MiB; fake, the process stays under 886 MiB in all.
    assert int(loaded["max_rss_mib"]) < 232_269_824 * 4 // 2**20 == 886


def test_a_checkpoint_the_trace_saved_loads_back_whole(loaded):
    """A trace's save_pretrained writes its fake tensors' dtypes and shapes into the file's
    header instead of data (plugins/hf/safetensors.py); loading that file back in a trace
    gives every one of them again."""
    assert int(loaded["reloaded"]) == 232_269_824
