"""A Hugging Face Llama with `attn_implementation="flash_attention_2"` trained on a padded batch,
as fine-tuning scripts load it: bf16 weights, a batch of 4 sequences of 256 positions whose
attention mask pads the ends, so transformers unpads the batch into one packed sequence and
calls `flash_attn_varlen_func`; 2 steps of AdamW."""

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                     num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                     max_position_embeddings=512)
model = AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2",
                                     dtype=torch.bfloat16).cuda()
opt = torch.optim.AdamW(model.parameters())
lengths = torch.tensor([256, 200, 150, 100])
mask = (torch.arange(256)[None, :] < lengths[:, None]).long()
for _ in range(2):
    ids = torch.randint(0, 1000, (4, 256))
    out = model(input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=ids.cuda())
    out.loss.backward()
    opt.step()
    opt.zero_grad()
