"""A streaming-corpus LM loop: an `IterableDataset` yielding token lists of varying length and a
custom `collate_fn` that pads them, as text pipelines without a map-style index do.

Patterns: `IterableDataset.__iter__` with `get_worker_info()` sharding, `DataLoader(batch_size=,
collate_fn=pad_collate, num_workers=0)`, padding with `torch.full` and an attention mask,
`ignore_index=-100` labels, a small `nn.TransformerEncoder` with a causal mask, AdamW, a
warm-up `LambdaLR`, `clip_grad_norm_` whose result is printed, `loss.tolist()`, `bool(t)`.
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

VOCAB, D_MODEL, HEADS, LAYERS, MAX_LEN, PAD = 1000, 128, 4, 2, 64, 0


class TokenStream(IterableDataset):
    def __init__(self, documents, seed=0):
        self.documents, self.seed = documents, seed

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        rng = random.Random(self.seed + worker)
        for i in range(worker, self.documents, workers):
            length = rng.randint(16, MAX_LEN)
            yield [rng.randrange(1, VOCAB) for _ in range(length)]


def pad_collate(batch):
    longest = max(len(seq) for seq in batch)
    ids = torch.full((len(batch), longest), PAD, dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, :len(seq)] = torch.tensor(seq)
    mask = ids != PAD
    labels = ids.masked_fill(~mask, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class StreamLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(MAX_LEN, D_MODEL))
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 4 * D_MODEL, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, input_ids, attention_mask):
        t = input_ids.size(1)
        x = self.embed(input_ids) + self.pos[:t]
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
        x = self.encoder(x, mask=causal, src_key_padding_mask=~attention_mask, is_causal=True)
        return self.head(x)


def build_model():
    return StreamLM()


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    warmup = 10
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    loader = DataLoader(TokenStream(documents=64), batch_size=8, collate_fn=pad_collate)
    for step, batch in enumerate(loader):
        batch = {k: v.to(device) for k, v in batch.items()}
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), batch["labels"][:, 1:].reshape(-1),
                               ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not bool(torch.isfinite(norm)):
            print("skipping step: non-finite gradient norm")
            continue
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.tolist():.4f} grad-norm {norm:.3f} "
              f"tokens {int(batch['attention_mask'].sum())}")
        if step == 4:
            break


if __name__ == "__main__":
    main()
