"""QLoRA written by hand: a tiny Llama built from its config in bf16, every projection of its
decoder layers replaced by bitsandbytes' `Linear4bit` (NF4, double quantization, bf16 compute)
and quantized by `.cuda()`, LoRA adapters (rank `--lora-rank`) from PEFT on the projections,
with `--train-embeddings` the (bf16) token embeddings trained too, and
bitsandbytes' paged 8-bit AdamW over what is trained (`--optimizer adamw8bit`: unpaged)."""

import argparse

import bitsandbytes as bnb
import torch
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--optimizer", default="paged_adamw8bit", choices=["paged_adamw8bit", "adamw8bit"])
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--lora-rank", type=int, default=8)
parser.add_argument("--train-embeddings", action="store_true")
args = parser.parse_args()

config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=128, tie_word_embeddings=False)
model = LlamaForCausalLM(config).to(torch.bfloat16)


def quantize(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear) and name != "lm_head":
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=False,
                                  compute_dtype=torch.bfloat16, compress_statistics=True,
                                  quant_type="nf4")
            q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False,
                                         compress_statistics=True, quant_type="nf4")
            setattr(module, name, q)
        else:
            quantize(child)


quantize(model.model.layers)
model = model.cuda()  # Params4bit quantizes as it moves
for p in model.parameters():
    p.requires_grad_(False)
targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=16, target_modules=targets))
if args.train_embeddings:
    model.get_input_embeddings().weight.requires_grad_(True)
params = [p for p in model.parameters() if p.requires_grad]
Optimizer = bnb.optim.PagedAdamW8bit if args.optimizer == "paged_adamw8bit" else bnb.optim.AdamW8bit
optimizer = Optimizer(params, lr=1e-4)
for step in range(args.steps):
    ids = torch.randint(0, config.vocab_size, (2, 64), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
