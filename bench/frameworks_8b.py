"""A ZeRO-3 rank and a QLoRA step of a Llama-3-8B-shaped model, traced by `memlens run`, against
the same model's plain bf16 training step under bare FakeTensorMode in the same run: wall time
and peak host RSS of each, as ratios to the bare step (absolute times here are noise).

    .venv/bin/python bench/frameworks_8b.py                 # both cases, then the bare step
    .venv/bin/python bench/frameworks_8b.py --case qlora

The model: Hugging Face `LlamaForCausalLM` with Llama-3-8B's shapes (32 layers, hidden 4096, MLP
14336, 32 heads, 8 KV heads, vocabulary 128,256; 8.03 B parameters), one sequence of 2,048
tokens, two steps, on the h100-80gb target.
  zero3  rank 0 of 8 (`memlens run --world-size 8`): built under `deepspeed.zero.Init`, as the
         Trainer does for ZeRO-3, then `deepspeed.initialize` (bf16, ZeRO stage 3, AdamW);
  qlora  one GPU: every decoder projection a bitsandbytes `Linear4bit` (NF4, double quant, bf16
         compute), LoRA rank 16 on all of them (PEFT), bitsandbytes' paged 8-bit AdamW;
  bare   a plain bf16 step with torch's AdamW under `FakeTensorMode` alone (what any trace of
         this model stands on; DeepSpeed and bitsandbytes need memlens' simulated CUDA and
         process groups, so the floor is the model's own step).
Each runs in a fresh process; its peak RSS is `getrusage(RUSAGE_CHILDREN)` of a helper that
started only it. Writes bench/results/frameworks_8b.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from host_rss_7b import child_rss  # noqa: E402

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                 max_position_embeddings=8192, tie_word_embeddings=False)
SEQ, STEPS = 2048, 2
DS_CONFIG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
             "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}


def train_zero3() -> None:
    import deepspeed
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    deepspeed.init_distributed()
    config = LlamaConfig(**LLAMA3_8B)
    with deepspeed.zero.Init(config_dict_or_path=DS_CONFIG):
        model = LlamaForCausalLM(config)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                      config=DS_CONFIG)
    ids = torch.randint(0, config.vocab_size, (1, SEQ), device=engine.device)
    for _ in range(STEPS):
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()


def train_qlora() -> None:
    import bitsandbytes as bnb
    import torch
    from peft import LoraConfig, get_peft_model
    from torch import nn
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**LLAMA3_8B)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=False,
                                          compute_dtype=torch.bfloat16,
                                          compress_statistics=True, quant_type="nf4")
                    q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False,
                                                 compress_statistics=True, quant_type="nf4")
                    setattr(parent, name, q)
    model = model.cuda()  # Params4bit quantizes as it moves
    for p in model.parameters():
        p.requires_grad_(False)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    optimizer = bnb.optim.PagedAdamW8bit([p for p in model.parameters() if p.requires_grad],
                                         lr=2e-4)
    ids = torch.randint(0, config.vocab_size, (1, SEQ), device="cuda")
    for _ in range(STEPS):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def bare() -> None:
    from memlens.cuda.build import ensure_fake_cuda_support

    ensure_fake_cuda_support()
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import LlamaConfig, LlamaForCausalLM

    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = LlamaForCausalLM(LlamaConfig(**LLAMA3_8B))
        torch.set_default_dtype(torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(0, LLAMA3_8B["vocab_size"], (1, SEQ), device="cuda")
        for _ in range(STEPS):
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=["zero3", "qlora", "all"], default="all")
    p.add_argument("--train", choices=["zero3", "qlora", "bare"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.train:
        {"zero3": train_zero3, "qlora": train_qlora, "bare": bare}[a.train]()
        return 0
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "python")}
    me = os.path.abspath(__file__)
    memlens = [sys.executable, "-m", "memlens", "run", "--device", "h100-80gb", "--json",
               "--no-snapshot", "--progress", "none"]
    commands = {"zero3": [*memlens, "--world-size", "8", "--", me, "--train", "zero3"],
                "qlora": [*memlens, "--", me, "--train", "qlora"]}
    cases = list(commands) if a.case == "all" else [a.case]
    rows = {}
    for case in [*cases, "bare"]:
        cmd = commands.get(case) or [sys.executable, me, "--train", "bare"]
        rss, wall, r = child_rss(cmd, env)
        if r["rc"] != 0:
            print(f"{case}: failed ({r['rc']})\n{r['stderr'][-2000:]}{r['stdout'][-2000:]}")
            return 1
        peak = json.loads(r["stdout"].strip().splitlines()[-1]).get("peak_bytes") \
            if case != "bare" else None
        rows[case] = {"wall_s": round(wall, 1), "rss_bytes": rss, "peak_bytes": peak}
        print(f"{case}: {wall:.1f} s, host RSS {rss / 2**30:.2f} GiB"
              + (f", peak {peak / 2**30:.2f} GiB" if peak else ""), flush=True)
    base = rows["bare"]
    for case in cases:
        rows[case]["wall_over_bare"] = round(rows[case]["wall_s"] / base["wall_s"], 2)
        rows[case]["rss_over_bare"] = round(rows[case]["rss_bytes"] / base["rss_bytes"], 2)
        print(f"{case}: {rows[case]['wall_over_bare']}x the bare step's wall time, "
              f"{rows[case]['rss_over_bare']}x its host RSS")
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "frameworks_8b.json"), "w") as f:
        json.dump({"date": dt.date.today().isoformat(), "machine": platform.node(),
                   "cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "rows": rows},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
