"""pytorch/examples imagenet-style loop: our own torchvision-free ResNet-18 on 64x64 images.

Patterns: a synthetic map-style `Dataset`, `DataLoader(num_workers=2, pin_memory=True,
shuffle=True, drop_last=True)`, `.cuda(non_blocking=True)`, SGD with momentum and weight decay,
`StepLR`, top-1/top-5 accuracy with `topk`/`eq`/`.sum()`, `AverageMeter`/`ProgressMeter`
printing `'{:.3f}'.format(...)`, `loss.item()`, `cudnn.benchmark = True`, a validation pass, a
checkpoint with `torch.save`, `random`/`numpy`/`torch` seeding, `argparse`.
"""
import argparse
import os
import random
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model():
    return ResNet()


class SyntheticImages(Dataset):
    """Random images and labels, made per item as a JPEG-decoding dataset would."""

    def __init__(self, n, size, classes):
        self.n, self.size, self.classes = n, size, classes

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        image = torch.randn(3, self.size, self.size, generator=g)
        return image, int(torch.randint(self.classes, (), generator=g))


class AverageMeter:
    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        self.num_batches, self.meters, self.prefix = num_batches, meters, prefix

    def display(self, batch):
        entries = [self.prefix + "[{}/{}]".format(batch, self.num_batches)]
        print("\t".join(entries + [str(m) for m in self.meters]), flush=True)


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch_size)
                for k in topk]


def train(loader, model, criterion, optimizer, epoch, device, print_freq):
    batch_time, losses = AverageMeter("Time", ":6.3f"), AverageMeter("Loss", ":.4e")
    top1, top5 = AverageMeter("Acc@1", ":6.2f"), AverageMeter("Acc@5", ":6.2f")
    progress = ProgressMeter(len(loader), [batch_time, losses, top1, top5], f"Epoch: [{epoch}]")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0].item(), images.size(0))
        top5.update(acc5[0].item(), images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % print_freq == 0:
            progress.display(i + 1)
            print("loss {:.3f}".format(loss.item()))


def validate(loader, model, criterion, device):
    top1 = AverageMeter("Acc@1", ":6.2f")
    model.eval()
    with torch.no_grad():
        for images, target in loader:
            images, target = images.to(device), target.to(device)
            output = model(images)
            acc1, = accuracy(output, target)
            top1.update(acc1[0].item(), images.size(0))
    print(" * Acc@1 {top1.avg:.3f}".format(top1=top1))
    return top1.avg


def main():
    parser = argparse.ArgumentParser(description="ImageNet-style training")
    parser.add_argument("--epochs", default=2, type=int)
    parser.add_argument("-b", "--batch-size", default=8, type=int)
    parser.add_argument("--lr", default=0.1, type=float)
    parser.add_argument("--momentum", default=0.9, type=float)
    parser.add_argument("--wd", default=1e-4, type=float)
    parser.add_argument("-j", "--workers", default=2, type=int)
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--print-freq", default=1, type=int)
    args = parser.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    cudnn.benchmark = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    model = build_model().to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.wd)
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    train_loader = DataLoader(SyntheticImages(32, 64, 1000), batch_size=args.batch_size,
                              shuffle=True, num_workers=args.workers, pin_memory=True,
                              drop_last=True)
    val_loader = DataLoader(SyntheticImages(16, 64, 1000), batch_size=args.batch_size,
                            shuffle=False, num_workers=args.workers, pin_memory=True)
    ckpt_dir = tempfile.mkdtemp(prefix="resnet_")
    best_acc1 = 0
    for epoch in range(args.epochs):
        train(train_loader, model, criterion, optimizer, epoch, device, args.print_freq)
        acc1 = validate(val_loader, model, criterion, device)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        path = os.path.join(ckpt_dir, "checkpoint.pth.tar")
        torch.save({"epoch": epoch + 1, "state_dict": model.state_dict(), "best_acc1": best_acc1,
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, path)
        if is_best:
            shutil.copyfile(path, os.path.join(ckpt_dir, "model_best.pth.tar"))


if __name__ == "__main__":
    main()
