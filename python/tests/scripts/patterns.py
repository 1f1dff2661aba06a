"""Patterns of ordinary training scripts that break naive fake-mode tracing."""
import copy

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        encoder_layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(encoder_layer, 2)  # deep-copies the layer
        with torch.no_grad():
            if torch.isnan(self.fc.weight).any():  # init that inspects values
                raise RuntimeError("NaN in init")
            scale = self.fc.weight.abs().max().item()
            self.fc.weight.mul_(1.0 if scale >= 0 else 0.5)

    def forward(self, x):
        return self.encoder(self.fc(x))


model = Net()
ema = copy.deepcopy(model)  # a second copy of the weights
model = model.to(torch.bfloat16)  # moved after it was built
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 16, 32, dtype=torch.bfloat16)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print("loss", loss.item())
