"""A Hugging Face seq2seq "no Trainer" loop: `T5ForConditionalGeneration` from a `T5Config`,
labels with `-100` padding, Adafactor-free AdamW, bf16 autocast.

Patterns: a `collate_fn` padding inputs and targets separately, `labels[labels == pad] = -100`
(boolean-mask assignment), `model(input_ids=, attention_mask=, labels=)` (the decoder inputs
come from shifting the labels inside the model), `torch.autocast("cuda", dtype=torch.bfloat16)`,
`get_linear_schedule_with_warmup`, `clip_grad_norm_`, `"%.3f" % loss.item()`.
"""
import random

import torch
from torch.utils.data import DataLoader
from transformers import T5Config, T5ForConditionalGeneration, get_linear_schedule_with_warmup

PAD = 0


def build_model():
    config = T5Config(vocab_size=1024, d_model=128, d_kv=32, d_ff=512, num_layers=2,
                      num_decoder_layers=2, num_heads=4, decoder_start_token_id=PAD,
                      pad_token_id=PAD)
    return T5ForConditionalGeneration(config)


def make_pairs(n):
    rng = random.Random(1)
    return [([rng.randrange(1, 1024) for _ in range(rng.randint(20, 48))],
             [rng.randrange(1, 1024) for _ in range(rng.randint(8, 24))]) for _ in range(n)]


def pad(rows):
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r)
    return out


def collate(batch):
    input_ids = pad([src for src, _ in batch])
    labels = pad([tgt for _, tgt in batch])
    labels[labels == PAD] = -100
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels}


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device)
    loader = DataLoader(make_pairs(32), batch_size=8, shuffle=True, collate_fn=collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = get_linear_schedule_with_warmup(optimizer, 1, len(loader))
    model.train()
    for step, batch in enumerate(loader):
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        print("step %d loss %.3f" % (step, loss.item()))


if __name__ == "__main__":
    main()
