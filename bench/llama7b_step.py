"""One training step of a Llama-7B-shaped model (Hugging Face transformers), for benchmarks.

    memlens run --device cpu -- bench/llama7b_step.py

Unmodified-script style: build the model, AdamW, two steps on random tokens. Under memlens every
tensor is fake, so this runs on a laptop; run for real it needs a large GPU.
"""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--seq-len", type=int, default=2048)
parser.add_argument("--layers", type=int, default=32)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()

config = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=args.layers,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                     max_position_embeddings=4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_dtype(torch.bfloat16)
with torch.device(device):
    model = LlamaForCausalLM(config)
torch.set_default_dtype(torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(args.steps):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
