"""A training script written for a GPU, run unmodified under `memlens run` (CI has no GPU)."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

assert torch.cuda.is_available(), "this script needs a GPU"
local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
torch.cuda.manual_seed(1234)
props = torch.cuda.get_device_properties(local_rank)
print(f"training on {props.name} with {props.total_memory / 2**30:.1f} GiB, "
      f"sm_{props.major}{props.minor}")


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class Net(nn.Module):
    def __init__(self, d=512, heads=8, layers=2):
        super().__init__()
        self.emb = nn.Embedding(1000, d)
        self.blocks = nn.ModuleList(Attention(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, 1000, device="cuda")  # built on the GPU directly

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = x + self.drop(block(self.norm(x)))
        return self.head(x)


model = Net().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
side = torch.cuda.Stream()
done = torch.cuda.Event()
for step in range(4):
    with torch.cuda.stream(side):
        idx = torch.randint(0, 1000, (8, 256), device="cuda")
        done.record()
    torch.cuda.current_stream().wait_event(done)
    target = torch.randint(0, 1000, (8, 256)).to("cuda", non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, 1000).float(), target.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"max_memory_allocated={torch.cuda.max_memory_allocated()}")
