"""A map-style `Dataset` whose `__getitem__` reads fixed-length windows out of a `np.memmap`
(the "pre-tokenised .bin shard" pattern), trained with a GRU language model.

Patterns: `np.memmap` opened lazily in the dataset (so that it pickles to workers),
`torch.from_numpy(window.astype(np.int64))`, `DataLoader(shuffle=False, num_workers=0,
pin_memory=True)`, `nn.GRU` with `batch_first`, SGD with momentum and Nesterov,
`CosineAnnealingLR`, `math.exp(loss)` perplexity, `"%.3f" % loss`, `torch.isnan(loss)` check.
"""
import math
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB, EMB, HIDDEN, SEQ = 2000, 128, 256, 64


class MemmapWindows(Dataset):
    def __init__(self, path, seq_len):
        self.path, self.seq_len = path, seq_len
        self.length = os.path.getsize(path) // np.dtype(np.uint16).itemsize
        self.data = None

    def __len__(self):
        return (self.length - 1) // self.seq_len

    def __getitem__(self, index):
        if self.data is None:  # opened in the process that reads
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        start = index * self.seq_len
        window = self.data[start:start + self.seq_len + 1]
        chunk = torch.from_numpy(window.astype(np.int64))
        return chunk[:-1], chunk[1:]


class GRULM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.rnn = nn.GRU(EMB, HIDDEN, num_layers=2, batch_first=True)
        self.proj = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        return self.proj(out)


def build_model():
    return GRULM()


def main():
    torch.manual_seed(42)
    path = os.path.join(tempfile.mkdtemp(prefix="shard_"), "train.bin")
    tokens = np.random.default_rng(0).integers(0, VOCAB, 64 * 40 + 1, dtype=np.uint16)
    tokens.tofile(path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = DataLoader(MemmapWindows(path, SEQ), batch_size=8, shuffle=False, num_workers=0,
                        pin_memory=True)
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader))
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        if torch.isnan(loss):
            raise RuntimeError(f"loss is NaN at step {step}")
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        scheduler.step()
        print("step %d loss %.3f ppl %.1f" % (step, loss, math.exp(loss.item())))


if __name__ == "__main__":
    main()
