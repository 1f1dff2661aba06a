"""Streams as GPU code uses them, printing torch.cuda.memory_reserved() after each step
(`MARK name bytes`). 12 MiB blocks are segments of their own (>= 10 MiB: rounded to 2 MiB,
never split), so every reuse or new segment shows in reserved memory."""

import torch

MiB = 1 << 20


def block():
    return torch.empty(12 * MiB, dtype=torch.uint8, device="cuda")


def mark(name):
    print("MARK", name, torch.cuda.memory_reserved(), flush=True)


side = torch.cuda.Stream()

# A block allocated on `side` and freed while the default stream is current goes back to
# side's pool: the default stream cannot reuse it, side can.
with torch.cuda.stream(side):
    a = block()
del a
b = block()
mark("default_after_side_free")
with torch.cuda.stream(side):
    c = block()
mark("side_reuses_its_block")

# record_stream: the block waits for side's work before it can be reused.
d = block()
d.record_stream(side)
del d
e = block()
mark("after_record_stream_free")
torch.cuda.current_stream().wait_stream(side)
f = block()
mark("after_wait_stream")

# An event recorded on side before a free covers nothing freed after it.
g = block()
early = side.record_event()
g.record_stream(side)
del g
torch.cuda.current_stream().wait_event(early)
h = block()
mark("after_early_event")
late = side.record_event()
late.synchronize()
i = block()
mark("after_late_event")

# A matmul on side takes a cuBLAS workspace for (main thread, side).
with torch.cuda.stream(side):
    w = torch.randn(64, 64, device="cuda")
    y = w @ w
mark("after_side_matmul")
z = w @ w
mark("after_default_matmul")
