"""A training step whose MLP uses a library's JIT-built fused bias-GeLU (fused_kernels/,
beside this script): the library falls back to PyTorch ops when its extension does not build.
Prints `BUILD <error type>: <message>` for what the build answered, then trains."""

import torch
from torch import nn

import fused_kernels


class MLP(nn.Module):
    def __init__(self, width: int = 1024):
        super().__init__()
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.bias = nn.Parameter(torch.zeros(4 * width))
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(fused_kernels.bias_gelu(self.up(x), self.bias))


def main() -> None:
    model = MLP().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(2):
        x = torch.randn(8, 256, 1024, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    e = fused_kernels.build_error
    print(f"BUILD {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
