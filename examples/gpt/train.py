"""Train the example GPT for a few steps, as one would on a GPU.

    python train.py --batch-size 8                       # on a real GPU
    memlens run -- examples/gpt/train.py --batch-size 8  # estimate it, no GPU needed
"""

import argparse
import time

import torch

from model import GPT

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--block-size", type=int, default=1024)
parser.add_argument("--n-layer", type=int, default=12)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(1337)
model = GPT(n_layer=args.n_layer, block_size=args.block_size).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                              fused=device == "cuda")
amp_dtype = getattr(torch, args.dtype)

for step in range(args.steps):
    t0 = time.time()
    x = torch.randint(0, 50304, (args.batch_size, args.block_size), device=device)
    y = torch.randint(0, 50304, (args.batch_size, args.block_size), device=device)
    with torch.autocast(device_type=device, dtype=amp_dtype, enabled=args.dtype != "float32"):
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"step {step}: loss {loss.item():.3f}, {time.time() - t0:.2f} s, peak {peak:.2f} GiB")
    else:
        print(f"step {step}: loss {loss.item():.3f}, {time.time() - t0:.2f} s")
