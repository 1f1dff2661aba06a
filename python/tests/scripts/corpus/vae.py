"""pytorch/examples vae-style: a fully connected VAE on 28x28 images with the reparameterisation
trick and a BCE + KL loss summed over the batch.

Patterns: `F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum")`, `torch.randn_like`,
`logvar.exp()`, Adam, `train_loss += loss.item()`, a `test()` pass under `torch.no_grad()` that
builds a comparison tensor with `torch.cat` and saves it with `torch.save` instead of an image,
`'{:.4f}'.format(train_loss / len(dataset))`.
"""
import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


def build_model():
    return VAE()


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.rand(128, 1, 28, 28)
    train_loader = DataLoader(TensorDataset(images, torch.zeros(128)), batch_size=args.batch_size,
                              shuffle=True)
    test_loader = DataLoader(TensorDataset(images[:64], torch.zeros(64)), batch_size=args.batch_size)
    model = build_model().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    out_dir = tempfile.mkdtemp(prefix="vae_")
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0
        for batch_idx, (data, _) in enumerate(train_loader):
            data = data.to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            print("Train Epoch: {} [{}/{}]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset), loss.item() / len(data)))
        print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / len(train_loader.dataset)))
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for i, (data, _) in enumerate(test_loader):
                data = data.to(device)
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
                if i == 0:
                    n = min(data.size(0), 8)
                    comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
                    torch.save(comparison.cpu(), os.path.join(out_dir, f"reconstruction_{epoch}.pt"))
        print("====> Test set loss: {:.4f}".format(test_loss / len(test_loader.dataset)))


if __name__ == "__main__":
    main()
