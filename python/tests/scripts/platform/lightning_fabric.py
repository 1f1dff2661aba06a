"""A training loop on Lightning Fabric, as the Fabric docs write it: `Fabric(accelerator=
"cuda", devices=1)`, `fabric.setup(model, optimizer)`, `fabric.setup_dataloaders`,
`fabric.backward(loss)`. A two-layer MLP (512 -> 1024 -> 512, fp32), AdamW, a
torchmetrics running mean of the loss (as litgpt keeps one), 2 steps."""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.aggregation import RunningMean


def main() -> None:
    fabric = L.Fabric(accelerator="cuda", devices=1)
    fabric.launch()
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    data = TensorDataset(torch.randn(256, 512), torch.randn(256, 512))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=32))
    running_loss = RunningMean(window=4, sync_on_compute=False).to(fabric.device)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        running_loss.update(loss.detach())
        fabric.print(f"step {step} loss {running_loss.compute().item():.3f}")


if __name__ == "__main__":
    main()
