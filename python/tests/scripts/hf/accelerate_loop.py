"""A GPT-2 training loop written with Hugging Face accelerate: `accelerate launch accelerate_loop.py`.

bf16 mixed precision, gradient accumulation through `accelerator.accumulate`, gradient clipping,
a warmup schedule, and a metric gathered across processes. The model is built from a config (no
weights are downloaded): GPT-2 with 2 layers of width 128 over a vocabulary of 1,000 tokens.
"""

import argparse

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


class RandomTokens(Dataset):
    """Token ids drawn once, with a fixed seed: a stand-in for a tokenized corpus."""

    def __init__(self, samples: int, length: int, vocab: int):
        self.ids = torch.randint(0, vocab, (samples, length),
                                 generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


p = argparse.ArgumentParser()
p.add_argument("--accumulation", type=int, default=2)
p.add_argument("--epochs", type=int, default=1)
args = p.parse_args()

accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=args.accumulation)
config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2, n_head=4)
model = GPT2LMHeadModel(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
loader = DataLoader(RandomTokens(256, 64, config.vocab_size), batch_size=4, shuffle=True)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2,
                                            num_training_steps=len(loader) * args.epochs)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

for epoch in range(args.epochs):
    model.train()
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses = accelerator.gather_for_metrics(loss.detach().reshape(1))
        if step % 4 == 0:
            accelerator.print(f"epoch {epoch} step {step} loss {losses.mean().item():.3f}")
accelerator.end_training()
