"""An evaluation loop: forward passes under inference_mode (or no_grad), no backward, no
optimizer, a loss module called next to the model."""
import argparse
import sys

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=10)
parser.add_argument("--no-grad", action="store_true", help="torch.no_grad, not inference_mode")
args = parser.parse_args()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(48, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU())
        self.head = nn.Linear(96, 10)

    def forward(self, x):
        return self.head(self.features(x))


model = Classifier().eval()
criterion = nn.CrossEntropyLoss()
context = torch.no_grad if args.no_grad else torch.inference_mode
correct = 0
with context():
    for i in range(args.batches):
        x, y = torch.randn(16, 48), torch.randint(0, 10, (16,))
        logits = model(x)
        loss = criterion(logits, y)
        correct += (logits.argmax(-1) == y).sum()
        print(f"batch {i + 1}", file=sys.stderr)
