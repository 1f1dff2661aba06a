"""Values that came from the host, read back on the device: a script that checks them itself
(each `check` exits with an error where a trace answered a made-up value) and one read of a
value that only a real GPU run knows (the line with `made_up`)."""
import sys

import torch


def check(got, want, what):
    if got != want:
        sys.exit(f"{what}: {got!r}, not {want!r}")


grid = torch.tensor([[1, 4, 4], [1, 6, 2]], device="cuda")  # an image processor's grid
check(grid.tolist(), [[1, 4, 4], [1, 6, 2]], "tolist")
merge = torch.tensor([2], device="cuda").expand(len(grid))
tokens = [int(t * h * w) // int(m) ** 2 for (t, h, w), m in zip(grid.tolist(), merge.tolist())]
check(tokens, [4, 3], "tokens per image")
lengths = torch.tensor([5, 3, 0, 2])
mask = (torch.arange(6)[None, :] < lengths[:, None]).to("cuda")  # a padded batch's mask
check(int(mask.sum()), 10, "mask.sum()")
check(tuple(torch.nonzero(mask).shape), (10, 2), "nonzero's size")
buffer = torch.empty(4, dtype=torch.long, device="cuda")
buffer.copy_(lengths)  # a host batch copied into a device buffer
check(buffer.cumsum(0).tolist(), [5, 8, 8, 10], "cumsum of the copy")
deltas = [buffer.max() - 1, buffer.min() + 1]
check(torch.tensor(deltas, device="cuda").tolist(), [4, 1], "a tensor of device scalars")
weights = torch.randn(4, device="cuda")  # random: a real run's values are its own
buffer.add_(weights.long())  # written over by unknown values: no longer known
made_up = int(buffer.sum())
print("host values checked")
