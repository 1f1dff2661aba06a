"""A plain PyTorch loop over a Hugging Face `LlamaForCausalLM` built from a `LlamaConfig` in
code, held in bf16 (the "pure bf16" fine-tuning recipe), with padded batches.

Patterns: `model.to(device, dtype=torch.bfloat16)`, `config.use_cache = False`,
`model.gradient_checkpointing_enable()`, a tokenizer-free collate padding to the longest with an
`attention_mask` and `-100` labels, AdamW over bf16 parameters (bf16 state), a
`get_cosine_schedule_with_warmup`, `outputs.loss`, `clip_grad_norm_`,
`torch.cuda.max_memory_allocated()` printed in GiB, `loss.detach().float()` accumulated.
"""
import random

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import LlamaConfig, LlamaForCausalLM, get_cosine_schedule_with_warmup


def build_model():
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688,
                         num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=256)
    config.use_cache = False
    return LlamaForCausalLM(config).to(torch.bfloat16)


class Samples(Dataset):
    def __init__(self, n):
        rng = random.Random(0)
        self.rows = [[rng.randrange(2, 2048) for _ in range(rng.randint(32, 128))] for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i]}


def collate(batch, pad_id=0):
    longest = max(len(b["input_ids"]) for b in batch)
    ids = torch.full((len(batch), longest), pad_id)
    mask = torch.zeros(len(batch), longest, dtype=torch.long)
    for i, b in enumerate(batch):
        ids[i, :len(b["input_ids"])] = torch.tensor(b["input_ids"])
        mask[i, :len(b["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model()
    model.to(device, dtype=torch.bfloat16)
    model.gradient_checkpointing_enable()
    model.train()
    loader = DataLoader(Samples(32), batch_size=4, shuffle=True, collate_fn=collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
    scheduler = get_cosine_schedule_with_warmup(optimizer, 1, len(loader))
    running = 0.0
    for step, batch in enumerate(loader):
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        running += loss.detach().float()
        if torch.cuda.is_available():
            print(f"step {step} loss {running / (step + 1):.4f} "
                  f"mem {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
