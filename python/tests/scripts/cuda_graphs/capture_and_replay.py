"""CUDA graphs as training code uses them, printing the caching allocator's counters at each
step (`MARK name allocated reserved`): a bias-free MLP's forward and backward captured after a
warm-up on a side stream and replayed; two graphs sharing a pool and one with a pool of its
own; make_graphed_callables on a module. fp32 throughout: a (512, 1024) activation is 2 MiB,
a 1024 x 1024 weight or gradient 4 MiB."""

import torch
import torch.nn as nn

MiB = 1 << 20


def mark(name):
    print("MARK", name, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)


# -- 1. an MLP's forward and backward, captured on the warm-up stream and replayed -----------
model = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.ReLU(),
                      nn.Linear(1024, 1024, bias=False)).cuda()
static_x = torch.randn(512, 1024, device="cuda")
static_grad = torch.randn(512, 1024, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        model(static_x).backward(static_grad)
torch.cuda.current_stream().wait_stream(side)
model.zero_grad(set_to_none=True)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=side):
    mark("capture_start")
    static_y = model(static_x)
    static_y.backward(static_grad)
mark("captured")
for _ in range(3):
    static_x.copy_(torch.randn(512, 1024, device="cuda"))
    graph.replay()
mark("replayed")
with torch.cuda.stream(side):
    after = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
mark("after_capture_on_side")

# -- 2. two graphs sharing a pool, and a third with its own ----------------------------------
first, second, third = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
with torch.cuda.graph(first):
    doubled = static_x * 2
mark("first_captured")
with torch.cuda.graph(second, pool=first.pool()):
    tripled = static_x * 3
mark("second_captured_in_first_pool")
with torch.cuda.graph(third):
    quadrupled = static_x * 4
mark("third_captured")
del first
torch.cuda.empty_cache()
mark("first_deleted")
del second, doubled, tripled
torch.cuda.empty_cache()
mark("second_deleted")

# -- 3. make_graphed_callables on a module ----------------------------------------------------
layer = nn.Linear(1024, 1024, bias=False).cuda()
sample = torch.randn(512, 1024, device="cuda")
mark("before_graphed")
graphed = torch.cuda.make_graphed_callables(layer, (sample,))
mark("graphed")
out = graphed(sample)
out.backward(torch.ones_like(out))
mark("graphed_step")

# -- 4. capture_begin / capture_end by hand, then reset --------------------------------------
manual = torch.cuda.CUDAGraph()
try:
    manual.capture_begin()  # on the default stream: PyTorch refuses
except RuntimeError as error:
    print("REFUSED", "non-default stream" in str(error), flush=True)
with torch.cuda.stream(side):
    manual.capture_begin()
    plus_one = static_x + 1
    manual.capture_end()
mark("manual_captured")
manual.replay()
manual.reset()
del plus_one
torch.cuda.empty_cache()
mark("manual_reset")

# -- 5. a stream that joins a capture --------------------------------------------------------
joiner = torch.cuda.Stream()
forked = torch.cuda.CUDAGraph()
with torch.cuda.graph(forked, stream=side):
    joiner.wait_stream(side)  # forks from the capturing stream: joiner captures too
    with torch.cuda.stream(joiner):
        on_joiner = static_x * 5
    side.wait_stream(joiner)  # and joins back before the capture ends
mark("joined_capture")
