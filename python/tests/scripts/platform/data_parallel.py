"""torch.nn.DataParallel over every GPU the process sees (`memlens run --gpus 4`): a small
convnet with BatchNorm, its batch scattered, the model replicated each forward, the outputs
gathered on cuda:0, SGD on cuda:0's parameters. Prints `GPUS n` and the output's device."""

import torch
from torch import nn


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def main() -> None:
    print(f"GPUS {torch.cuda.device_count()}", flush=True)
    model = nn.DataParallel(ConvNet().cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(64, 3, 32, 32, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        out = model(x)
        print(f"OUTPUT {out.device} {tuple(out.shape)}", flush=True)
        nn.functional.cross_entropy(out, y).backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
