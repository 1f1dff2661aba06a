"""Tensor parallelism with Lightning's ModelParallelStrategy, as Lightning's tensor-parallel
example writes it (`configure_model` parallelizes on `self.device_mesh["tensor_parallel"]`):
`python lightning_tensor_parallel.py`, 4 GPUs, the MLP 512 -> 1024 -> 512 split
column-wise then row-wise, AdamW, 2 steps. Lightning binds the default group to the device,
so DeviceMesh splits its groups from it (`split_group`)."""

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader, TensorDataset


class TensorParallelMLP(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(512, 1024)
        self.w2 = nn.Linear(1024, 512)

    def configure_model(self) -> None:
        mesh = self.device_mesh["tensor_parallel"]
        parallelize_module(self, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.w2(torch.relu(self.w1(x))), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=True)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(256, 512), torch.randn(256, 512))
        return DataLoader(data, batch_size=32)


def main() -> None:
    strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=4)
    trainer = L.Trainer(accelerator="cuda", devices=4, strategy=strategy, max_steps=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(TensorParallelMLP())


if __name__ == "__main__":
    main()
