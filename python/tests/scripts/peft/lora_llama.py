"""LoRA fine-tuning of a tiny Llama built from its config (no download): `get_peft_model` with
`--adapter lora|dora|ia3` on the attention and MLP projections, AdamW over the trainable
parameters only, bf16-free fp32, a few steps."""

import argparse

import torch
from peft import IA3Config, LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--adapter", default="lora", choices=["lora", "dora", "ia3"])
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=128, tie_word_embeddings=False)
model = LlamaForCausalLM(config).to(device)
targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
if args.adapter == "ia3":
    adapter = IA3Config(target_modules=targets, feedforward_modules=["down_proj"])
else:
    adapter = LoraConfig(r=8, lora_alpha=16, target_modules=targets,
                         use_dora=args.adapter == "dora")
model = get_peft_model(model, adapter)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
for step in range(args.steps):
    ids = torch.randint(0, config.vocab_size, (2, 64), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
