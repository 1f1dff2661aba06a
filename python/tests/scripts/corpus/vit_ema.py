"""A timm-style ViT training loop: patch embedding, class token, pre-norm blocks, bf16
`torch.autocast`, an EMA of the weights with `torch.optim.swa_utils.AveragedModel`.

Patterns: `AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))` and
`ema.update_parameters(model)` after each step, parameter groups without weight decay for
norms/biases (`p.ndim <= 1`), AdamW, `CosineAnnealingLR` after a `LinearLR` warm-up in a
`SequentialLR`, label smoothing in `CrossEntropyLoss`, `torch.backends.cudnn.benchmark`,
`torch.set_float32_matmul_precision("high")`, an accuracy counter with `.sum().item()`, EMA
evaluation, a checkpoint holding both state dicts.
"""
import os
import tempfile

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset

IMG, PATCH, DIM, DEPTH, HEADS, CLASSES = 64, 8, 192, 4, 3, 100


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, (IMG // PATCH) ** 2 + 1, DIM) * 0.02)
        self.blocks = nn.Sequential(*[Block(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def build_model():
    return VisionTransformer()


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(("cls_token", "pos_embed")) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3, betas=(0.9, 0.999))
    epochs, steps = 2, 4
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=steps)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * steps)
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cosine], milestones=[steps])
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    data = TensorDataset(torch.randn(32, 3, IMG, IMG), torch.randint(0, CLASSES, (32,)))
    loader = DataLoader(data, batch_size=8, shuffle=True, drop_last=True, num_workers=2,
                        pin_memory=True, persistent_workers=True)
    for epoch in range(epochs):
        model.train()
        for step, (images, target) in enumerate(loader):
            images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = criterion(model(images), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            ema.update_parameters(model)
            scheduler.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.2e}")
        ema.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
            for images, target in loader:
                correct += (ema(images.to(device)).argmax(-1) == target.to(device)).sum().item()
        print(f"ema top-1 {100.0 * correct / len(data):.2f}%")
        torch.save({"model": model.state_dict(), "ema": ema.module.state_dict()},
                   os.path.join(tempfile.mkdtemp(prefix="vit_"), "checkpoint.pth"))


if __name__ == "__main__":
    main()
