"""A self-contained training script: its model classes are defined here, in `__main__`, with
the long attribute names real models use."""
import torch
import torch.nn as nn


class FeedForwardBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.intermediate_dense_projection = nn.Linear(width, 4 * width)
        self.output_dense_projection = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.output_dense_projection(
            torch.relu(self.intermediate_dense_projection(x)))


class TinyTransformerEncoderForSequenceClassification(nn.Module):
    def __init__(self, width=64, depth=3, classes=5):
        super().__init__()
        self.transformer_encoder_layers = nn.ModuleList(FeedForwardBlock(width)
                                                        for _ in range(depth))
        self.sequence_classification_head = nn.Linear(width, classes)

    def forward(self, x):
        for layer in self.transformer_encoder_layers:
            x = layer(x)
        return self.sequence_classification_head(x.mean(1))


if __name__ == "__main__":
    model = TinyTransformerEncoderForSequenceClassification()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        x, y = torch.randn(8, 16, 64), torch.randint(0, 5, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
