#!/usr/bin/env python3
"""The default Fashion-MNIST recipe as a plain PyTorch eager script: the peer that Stoker's
default recipe is timed against (issue 10, docs/BENCHMARKS.md).

Same model (configs/fashion_mnist.yaml's compact ResNet: a 3x3 stem, one basic block per stage of
widths 16, 32, 128, global average pool, linear), same data (the gzipped IDX files that Debian's
dataset-fashion-mnist installs, normalised with mean 0.286 / std 0.353, random horizontal flip),
same optimisation (SGD + Nesterov, momentum 0.9, weight decay 5e-4 off norms and biases, label
smoothing 0.1, cosine per step after 0.6 warm-up epochs, batch 128, drop_last, channels-last) and
the same evaluation after every epoch. It is what a PyTorch user would write: the whole data set as
tensors in memory, a batch indexed per step (no DataLoader, which is slower for 28x28 images),
torch's default initialisation. --precision bf16-mixed runs the steps under CPU autocast.

    python bench/torch_fashion_mnist.py [--epochs 12] [--batch-size 128] [--lr 0.1]
                                        [--precision fp32|bf16-mixed] [--threads N]

Its defaults are the recipe as issue 10 measured it first (fp32, 12 epochs, lr 0.1); the recipe now
trains bf16-mixed for 10 epochs at lr 0.2, and `--epochs 10 --lr 0.2` gives the script that schedule
(docs/BENCHMARKS.md has both comparisons).

Prints one line per epoch and a final JSON line (top-1, wall time, train samples/s).
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_split(root, prefix):
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")).unsqueeze(1)
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")).long()
    return images, labels


def conv3x3(cin, cout, stride):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout, 1), nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + (self.shortcut(x) if self.shortcut is not None else x)
        return F.relu(out)


def compact_resnet(widths=(16, 32, 128), num_classes=10):
    layers = [conv3x3(1, widths[0], 1), nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
    channels = widths[0]
    for stage, width in enumerate(widths):
        layers.append(BasicBlock(channels, width, 2 if stage > 0 else 1))
        channels = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)


def cosine_lr(step, base_lr, warmup, total):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * t))


def evaluate(model, images, labels, mean, std, autocast):
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for i in range(0, len(labels), 1000):
            x = ((images[i:i + 1000].float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)
            logits = model(x).float()
            loss_sum += F.cross_entropy(logits, labels[i:i + 1000], reduction="sum").item()
            correct += (logits.argmax(1) == labels[i:i + 1000]).sum().item()
    model.train()
    return correct / len(labels), loss_sum / len(labels)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=ROOT)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=0.6)
    p.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def main():
    args = parse_args()
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_x, train_y = load_split(args.root, "train")
    test_x, test_y = load_split(args.root, "t10k")
    mean, std = 0.286, 0.353
    autocast = args.precision == "bf16-mixed"
    model = compact_resnet().to(memory_format=torch.channels_last)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    optimizer = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=args.lr, momentum=0.9, nesterov=True)
    steps_per_epoch = len(train_y) // args.batch_size
    total = steps_per_epoch * args.epochs
    warmup = round(args.warmup_epochs * steps_per_epoch)
    step, train_time, top1 = 0, 0.0, 0.0
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        order = torch.randperm(len(train_y))
        loss_sum = torch.zeros(())
        for b in range(steps_per_epoch):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            x = train_x[idx].float() / 255
            flip = torch.rand(len(idx)) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(3), x)
            x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(step, args.lr, warmup, total)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), train_y[idx], label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1
        train_time += time.perf_counter() - epoch_start
        top1, test_loss = evaluate(model, test_x, test_y, mean, std, autocast)
        print(f"epoch {epoch}/{args.epochs}: train loss {loss_sum.item() / steps_per_epoch:.4f}, "
              f"test loss {test_loss:.4f}, test top-1 {100 * top1:.2f}%, "
              f"{time.perf_counter() - epoch_start:.0f}s", flush=True)
    wall = time.perf_counter() - start
    print(json.dumps({"script": "torch_fashion_mnist", "precision": args.precision, "epochs": args.epochs,
                      "batch_size": args.batch_size, "test_top1": round(100 * top1, 2),
                      "wall_s": round(wall, 1),
                      "train_samples_per_s": round(steps_per_epoch * args.batch_size * args.epochs / train_time),
                      "threads": args.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
