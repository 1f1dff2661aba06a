"""A Lightning-free "Trainer" class, the shape many research repos hand-roll.

Patterns: a `Trainer` object holding model/optimizer/loaders, metrics dicts of floats per epoch,
a `tqdm` progress bar with `set_postfix(loss=f"{loss.item():.4f}")`, `OneCycleLR` stepped per
batch, an evaluation pass, early stopping on `val_loss.item()`, `torch.save` of the best
`state_dict`, `float(loss)`, a `TensorDataset` `DataLoader` with `shuffle=True`, `drop_last`.
The model is a plain MLP (no dropout, no norm) so that its saved activations can be counted by
hand: batch 64, widths 256 -> 1024 -> 1024 -> 10.
"""
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    from tqdm import tqdm
except ImportError:  # a progress bar is nice to have
    def tqdm(iterable, **_):
        return iterable

BATCH, IN, HIDDEN, OUT = 64, 256, 1024, 10


def build_model():
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, OUT))


class Trainer:
    def __init__(self, model, train_loader, val_loader, epochs=3, lr=1e-3, patience=2,
                 device="cpu"):
        self.device = device
        self.model = model.to(device)
        self.train_loader, self.val_loader = train_loader, val_loader
        self.epochs, self.patience = epochs, patience
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=lr, total_steps=epochs * len(train_loader))
        self.history = {"train_loss": [], "val_loss": [], "val_acc": []}
        self.best_path = os.path.join(tempfile.mkdtemp(prefix="trainer_"), "best.pt")

    def training_step(self, batch):
        x, y = (t.to(self.device) for t in batch)
        logits = self.model(x)
        return F.cross_entropy(logits, y)

    def train_epoch(self, epoch):
        self.model.train()
        total, batches = 0.0, 0
        bar = tqdm(self.train_loader, desc=f"epoch {epoch}", leave=False)
        for batch in bar:
            loss = self.training_step(batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
            total += float(loss)
            batches += 1
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss.item():.4f}", lr=self.scheduler.get_last_lr()[0])
        return {"train_loss": total / max(batches, 1)}

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses, correct, seen = [], 0, 0
        for x, y in self.val_loader:
            x, y = x.to(self.device), y.to(self.device)
            logits = self.model(x)
            losses.append(F.cross_entropy(logits, y))
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += y.numel()
        val_loss = torch.stack(losses).mean()
        return {"val_loss": val_loss.item(), "val_acc": correct / seen}

    def fit(self):
        best, bad_epochs = float("inf"), 0
        for epoch in range(self.epochs):
            metrics = {**self.train_epoch(epoch), **self.evaluate()}
            for key, value in metrics.items():
                self.history[key].append(value)
            print(" ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
            if metrics["val_loss"] < best:
                best, bad_epochs = metrics["val_loss"], 0
                torch.save(self.model.state_dict(), self.best_path)
            else:
                bad_epochs += 1
                if bad_epochs >= self.patience:
                    print(f"early stopping at epoch {epoch}")
                    break
        return self.history


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = TensorDataset(torch.randn(256, IN), torch.randint(0, OUT, (256,)))
    val = TensorDataset(torch.randn(128, IN), torch.randint(0, OUT, (128,)))
    trainer = Trainer(build_model(), DataLoader(train, batch_size=BATCH, shuffle=True, drop_last=True),
                      DataLoader(val, batch_size=BATCH), device=device)
    trainer.fit()


if __name__ == "__main__":
    main()
