"""A tiny Hugging Face Llama (built from its config) compiled whole with `torch.compile`, trained
with AdamW on random tokens, as a from-scratch Hugging Face loop does. `--eager`: the same loop
without compiling, for comparison. Its forward starts a DynamicCache, whose layers begin as
`torch.tensor([], device="cuda")`: a constant in the compiled graph."""
import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--eager", action="store_true")
args = parser.parse_args()

config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=512)
model = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
model.train()
if not args.eager:
    model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    input_ids = torch.randint(0, config.vocab_size, (2, 256), device="cuda")
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
