"""Deep copies of tensors made in a module's constructor: torchmetrics' `add_state` copies its
default (`torch.tensor(0.0)`, made in `MeanMetric.__init__`), a metric copied after it moved to
the GPU (as Lightning's logging and litgpt's RunningMean do), a fake buffer made in the
constructor, and an EMA copy of the whole model (its parameters' data then reassigned,
`p.data = p.data.contiguous()`, as PEFT does with the module copies of `modules_to_save`). Prints one `COPY name device shape` line each."""

import copy

import torch
import torchmetrics
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(256, 256)
        self.loss_mean = torchmetrics.MeanMetric()
        self.register_buffer("table", torch.zeros(64, 256))  # fake: made in the constructor
        self.table_copy = copy.deepcopy(self.table)

    def forward(self, x):
        return self.fc(x) + self.table[:1]


def show(name: str, t: torch.Tensor) -> None:
    print(f"COPY {name} {t.device} {tuple(t.shape)}", flush=True)


def main() -> None:
    model = Net().cuda()
    show("init_copy", model.table_copy)
    show("metric_default", model.loss_mean._defaults["mean_value"])
    ema = copy.deepcopy(model)
    for p in ema.parameters():  # as PEFT's modules_to_save does with its copy
        p.data = p.data.contiguous()
    show("ema_weight", ema.fc.weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(32, 256, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        model.loss_mean.update(loss.detach())
        copied = copy.deepcopy(model.loss_mean)
        show("metric_copy", copied.mean_value)
        model.loss_mean.reset()


if __name__ == "__main__":
    main()
