"""nanoGPT-style train.py: a GPT trained from a uint16 `np.memmap` of tokens.

Patterns: `get_batch` re-opening the memmap each call, `torch.randint` offsets used to slice it,
`torch.from_numpy(...astype(np.int64))`, `pin_memory().to(device, non_blocking=True)`,
`estimate_loss()` under `model.eval()` + `torch.no_grad()`, fp16 `torch.autocast` with a
`GradScaler`, `clip_grad_norm_` after `scaler.unscale_`, a cosine learning rate set by hand in
`param_groups`, `f"{loss:.4f}"`, `torch.set_float32_matmul_precision("high")`, a checkpoint dict
with `torch.save`. Module-level code, no `main()`, as nanoGPT has it.
"""
import math
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# -- config (nanoGPT keeps these as globals a configurator may overwrite) --
batch_size = 8
block_size = 128
n_layer, n_head, n_embd = 2, 4, 128
vocab_size = 512
learning_rate, min_lr = 6e-4, 6e-5
warmup_iters, lr_decay_iters, max_iters = 2, 10, 4
eval_interval, eval_iters = 2, 2
grad_clip = 1.0
out_dir = tempfile.mkdtemp(prefix="nanogpt_")

torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")
device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
dtype = "float16"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = torch.autocast(device_type=device_type, dtype=ptdtype)

# a small token file, as prepare.py would have written it
data_dir = tempfile.mkdtemp(prefix="tokens_")
for split, n in (("train", 20_000), ("val", 4_000)):
    arr = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="w+", shape=(n,))
    arr[:] = np.random.default_rng(0).integers(0, vocab_size, n, dtype=np.uint16)
    arr.flush()


def get_batch(split):
    # re-open the memmap each call, so that its pages are not held (as nanoGPT does)
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


model = GPT()
print("number of parameters: %.2fM" % (sum(p.numel() for p in model.parameters()) / 1e6,))
model.to(device)
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95),
                              weight_decay=0.1)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


X, Y = get_batch("train")
best_val_loss = 1e9
for iter_num in range(max_iters):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss:
            best_val_loss = losses["val"]
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "iter_num": iter_num, "best_val_loss": best_val_loss}
            torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    with ctx:
        logits, loss = model(X, Y)
    X, Y = get_batch("train")  # prefetch the next batch while the GPU works
    scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item()
    print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}")
