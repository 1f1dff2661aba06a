"""A Llama trained in a plain loop, with the KV cache off as training scripts set it
(`model.config.use_cache = args.use_cache`), or with the config's default (`--use-cache`: the forward
makes a cache and each decoder layer writes its own entry, by its `layer_idx`). Layer replay's
Hugging Face cases (tests/engine/test_layer_replay.py). `--keep-output`: the model's output, and
its cache, kept until the next step's forward has run (the loss read from it, as notebooks do),
not let go before the backward. `--scale-by-depth`: each decoder layer scales its output by
its depth, read from the attention's `layer_idx` (an index used for more than the cache).
`--generate N`: before each step, `generate` N tokens greedily in eval mode (a prefill, then
decode steps that grow each layer's cache entry).

    python llama_loop.py [--layers 6] [--steps 2] [--use-cache] [--keep-output] [--scale-by-depth]
                         [--generate N]
"""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--use-cache", action="store_true")
parser.add_argument("--keep-output", action="store_true")
parser.add_argument("--scale-by-depth", action="store_true")
parser.add_argument("--generate", type=int, default=0)
args = parser.parse_args()

config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688,
                     num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
                     max_position_embeddings=512)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.config.use_cache = args.use_cache


class DepthScaledLayer(LlamaDecoderLayer):
    def forward(self, hidden_states, *rest, **kwargs):
        out = super().forward(hidden_states, *rest, **kwargs)
        return out * (1.0 / (self.self_attn.layer_idx + 1) ** 0.5)


if args.scale_by_depth:
    for layer in model.model.layers:
        layer.__class__ = DepthScaledLayer
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

for step in range(args.steps):
    if args.generate:
        model.eval()
        with torch.no_grad():
            prompt = torch.randint(0, config.vocab_size, (2, 32), device=device)
            model.generate(prompt, max_new_tokens=args.generate, do_sample=False)
        model.train()
    ids = torch.randint(0, config.vocab_size, (2, 256), device=device)
    if args.keep_output:
        output = model(input_ids=ids, labels=ids)
        loss = output.loss
    else:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
