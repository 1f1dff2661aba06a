"""A timm train.py-style loop with a hand-written EMA of the weights (`lerp_` under no_grad),
a ConvNeXt-ish network, and every common way a script reads a value back.

Patterns: a `ModelEmaV3`-like class copying the model with `copy.deepcopy` and updating with
`ema_p.lerp_(p, 1 - decay)` over `zip(ema.parameters(), model.parameters())`, an
`AverageMeter`, `torch.isnan(loss)` / `if not torch.isfinite(loss): ...`, `float(loss)`,
`"%.3f" % loss`, `loss.tolist()`, `bool(t)`, `int(t)`, `clip_grad_norm_` whose result is
printed, `torch.save(model.state_dict(), ...)`, AdamW with `foreach=True`, a per-step
`LambdaLR` cosine, `torch.backends.cudnn.benchmark = True`, numpy/random seeding.
"""
import copy
import math
import os
import random
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class TinyConvNeXt(nn.Module):
    def __init__(self, dims=(48, 96, 192), classes=100):
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 4, 4)
        stages = []
        for i, d in enumerate(dims):
            if i:
                stages.append(nn.Conv2d(dims[i - 1], d, 2, 2))
            stages += [ConvBlock(d), ConvBlock(d)]
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


def build_model():
    return TinyConvNeXt()


class ModelEma:
    def __init__(self, model, decay=0.9998):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for ema_p, p in zip(self.module.parameters(), model.parameters()):
            ema_p.lerp_(p, 1.0 - self.decay)


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def main():
    seed = 42
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model()
    model.to(device)
    ema = ModelEma(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05, foreach=True)
    total = 6
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / total)))
    losses = AverageMeter()
    ckpt = os.path.join(tempfile.mkdtemp(prefix="timm_"), "last.pth")
    for step in range(total):
        images = torch.randn(8, 3, 64, 64).to(device)
        target = torch.randint(0, 100, (8,)).to(device)
        output = model(images)
        loss = F.cross_entropy(output, target)
        if torch.isnan(loss):
            print("NaN loss, skipping")
            continue
        if not torch.isfinite(loss):
            raise SystemExit("non-finite loss")
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        scheduler.step()
        ema.update(model)
        losses.update(float(loss), images.size(0))
        correct = int((output.argmax(1) == target).sum())
        top1 = correct / target.numel()
        print("step %d loss %.3f (avg %.3f) top1 %.2f grad-norm %.3f" % (step, loss, losses.avg,
                                                                          top1, grad_norm))
        print("raw", loss.tolist(), "finite", bool(torch.isfinite(grad_norm)))
        torch.save(model.state_dict(), ckpt)


if __name__ == "__main__":
    main()
