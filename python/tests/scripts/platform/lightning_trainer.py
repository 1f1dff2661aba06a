"""A LightningModule trained by `lightning.Trainer` on GPUs, as the Lightning docs write it:
`python lightning_trainer.py [--devices N] [--strategy auto|ddp|fsdp]`. A two-layer MLP
(512 -> 1024 -> 512, fp32), AdamW, `self.log` of the loss (a torchmetrics mean inside
Lightning), a `prepare_data` hook, 2 steps, no logger, no checkpoints."""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def prepare_data(self) -> None:
        # Where a real script downloads its data: Lightning runs it on rank 0 inside its
        # infinite barrier (a Gloo group's monitored_barrier) when the job is distributed.
        self.prepared = True

    def train_dataloader(self):
        data = TensorDataset(torch.randn(256, 512), torch.randn(256, 512))
        return DataLoader(data, batch_size=32)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    args = p.parse_args()
    trainer = L.Trainer(accelerator="gpu", devices=args.devices, strategy=args.strategy,
                        max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor())


if __name__ == "__main__":
    main()
