"""Sampling completions with `generate`, then one training step on them, as RL fine-tuning
loops do (TRL's GRPO): a tiny Llama, 4 prompts of 16 tokens, at most 24 new tokens sampled
(EOS may end a row early), then the usual loss on prompt + completion."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     eos_token_id=2, pad_token_id=0, bos_token_id=1)
model = LlamaForCausalLM(config).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(2):
    prompts = torch.randint(3, 1000, (4, 16)).cuda()
    with torch.no_grad():
        completions = model.generate(prompts, attention_mask=torch.ones_like(prompts),
                                     max_new_tokens=24, do_sample=True)
    print("generated", tuple(completions.shape))
    loss = model(completions, labels=completions).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
