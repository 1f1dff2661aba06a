"""A classifier trained from a DataLoader over a memmap-backed Dataset, as image/text
classification examples write it: shuffled, worker processes, pinned memory, a custom collate,
`.cuda(non_blocking=True)`, accuracy counted with `.item()`.

    python host_data_loader.py [--workers N] [--pin] [--iterable] [--distributed]
"""
import argparse
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

FEATURES, CLASSES, SAMPLES = 64, 10, 512

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--pin", action="store_true")
parser.add_argument("--iterable", action="store_true")
parser.add_argument("--distributed", action="store_true")
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

root = tempfile.mkdtemp()
features_path = os.path.join(root, "features.f32")
labels_path = os.path.join(root, "labels.i64")
rng = np.random.default_rng(0)
rng.standard_normal((SAMPLES, FEATURES), dtype=np.float32).tofile(features_path)
rng.integers(0, CLASSES, SAMPLES).astype(np.int64).tofile(labels_path)


class MemmapDataset(Dataset):
    def __init__(self):
        self.features = np.memmap(features_path, dtype=np.float32, mode="r").reshape(-1, FEATURES)
        self.labels = np.memmap(labels_path, dtype=np.int64, mode="r")

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self.features[i])), int(self.labels[i])


class StreamingDataset(IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        data = MemmapDataset()
        for i in range(start, len(data), step):
            yield data[i]


def collate(samples):
    xs, ys = zip(*samples)
    return torch.stack(xs), torch.tensor(ys, dtype=torch.long)


model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, CLASSES)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

if args.iterable:
    dataset, sampler = StreamingDataset(), None
else:
    dataset = MemmapDataset()
    sampler = DistributedSampler(dataset, num_replicas=int(os.environ.get("WORLD_SIZE", 1)),
                                 rank=int(os.environ.get("RANK", 0)), shuffle=True) \
        if args.distributed else None
loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None and not args.iterable,
                    sampler=sampler, num_workers=args.workers, pin_memory=args.pin,
                    drop_last=True, collate_fn=collate)

for epoch in range(3):
    if sampler is not None:
        sampler.set_epoch(epoch)
    correct = seen = 0
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        correct += (logits.argmax(dim=1) == y).sum().item()
        seen += y.size(0)
        if step % 4 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} acc {correct / seen:.3f}")
