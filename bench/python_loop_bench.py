#!/usr/bin/env python3
"""bench/python_loop_bench.py: the plain PyTorch training loop of examples/python/train_fashion_mnist.py
(same model, optimizer, schedule, seed) on Fashion-MNIST, its batches from stoker.Loader or from torch's
DataLoader, for issue 38's claim that the loop on stoker.Loader reaches the same accuracy in less wall
time. Both loaders do the same work per sample: the gzipped IDX files read once, random crop 28 with
padding 2, horizontal flip, normalise with mean 0.286 / std 0.353, shuffled batches of --batch-size,
--threads threads (stoker) or worker processes (torch, persistent, torchvision.transforms.v2 on tensors).
Prints one JSON line: top-1 on the 10,000 test images after --epochs, wall time of the training epochs
(loader start-up included), train samples/s.

  PYTHONPATH=build/release/python python bench/python_loop_bench.py --loader stoker|torch [--epochs 2]
"""
import argparse
import gzip
import importlib.util
import json
import os
import pathlib
import struct
import time

import torch
import torch.nn.functional as F

ROOT = "/usr/share/datasets/fashion-mnist"
EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "python" / "train_fashion_mnist.py"


def example():
    spec = importlib.util.spec_from_file_location("train_fashion_mnist", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_idx(name):
    with gzip.open(os.path.join(ROOT, name), "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).view(count, 1, rows, cols)
    return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).long()


class FashionMnist(torch.utils.data.Dataset):
    def __init__(self, split):
        prefix = "train" if split == "train" else "t10k"
        self.images = read_idx(f"{prefix}-images-idx3-ubyte.gz")
        self.labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz")
        from torchvision.transforms import v2
        augment = [v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip()] if split == "train" else []
        self.transform = v2.Compose(augment + [v2.ToDtype(torch.float32, scale=True),
                                               v2.Normalize([0.286], [0.353])])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


def torch_loader(split, batch_size, workers):
    return torch.utils.data.DataLoader(FashionMnist(split), batch_size=batch_size, shuffle=split == "train",
                                       drop_last=split == "train", num_workers=workers,
                                       persistent_workers=workers > 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loader", choices=["stoker", "torch"], required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2, help="loader threads (stoker) or workers (torch)")
    a = ap.parse_args()
    ex = example()
    torch.manual_seed(0)
    net = ex.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    start = time.perf_counter()
    train = ex.loader("train", a.batch_size, a.threads) if a.loader == "stoker" else \
        torch_loader("train", a.batch_size, a.threads)
    samples = 0
    for epoch in range(a.epochs):
        if a.loader == "stoker":
            train.set_epoch(epoch)
        for images, labels in train:
            loss = F.cross_entropy(net(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            samples += labels.numel()
    seconds = time.perf_counter() - start
    test = ex.loader("eval", 1000, a.threads, rank=0, world_size=1)
    top1 = ex.evaluate(net, test)
    print(json.dumps({"loader": a.loader, "epochs": a.epochs, "batch": a.batch_size, "threads": a.threads,
                      "top1": round(100 * top1, 2), "train_seconds": round(seconds, 1),
                      "samples_per_s": round(samples / seconds, 1), "last_loss": round(loss.item(), 4),
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
