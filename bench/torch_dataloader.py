#!/usr/bin/env python3
"""bench/torch_dataloader.py: PyTorch's baseline for the data-pipeline target (Stoker issue 3).

torchvision ImageFolder (PIL decode) -> RandomResizedCrop(224) -> RandomHorizontalFlip -> PILToTensor
(uint8, no normalisation: the CPU work Stoker's loader does), batched by torch.utils.data.DataLoader
(shuffle, drop_last, persistent workers when N > 0; everything else PyTorch's defaults, so each worker
runs torch with 1 thread). Epochs run back to back; the first --warmup batches (worker start-up,
first reads) are not timed. Prints one JSON line:
  samples_per_s  timed samples / timed seconds
  per_core       samples_per_s / max(workers, 1): the rate of one loading process (workers=0: the
                 main process does all the work on one core)
  seconds        timed wall-clock seconds

With --rand-augment M (and --rand-ops N, default 2), torchvision.transforms.v2.RandAugment(num_ops=N,
magnitude=M) runs after PILToTensor, on the uint8 tensor (Stoker's rand_augment does the same ops on
uint8 in its workers).

  torch_dataloader.py --root DIR --workers N [--batch 64] [--batches 30] [--warmup 3] [--rand-augment 9]
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=30, help="timed batches")
    ap.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    ap.add_argument("--rand-augment", type=int, default=None, metavar="M",
                    help="append torchvision.transforms.v2.RandAugment at magnitude M")
    ap.add_argument("--rand-ops", type=int, default=2, help="RandAugment's num_ops")
    ap.add_argument("--v2", action="store_true", help="torchvision.transforms.v2's RandomResizedCrop, "
                    "RandomHorizontalFlip and PILToTensor (the same work) instead of v1's")
    a = ap.parse_args()

    torch.manual_seed(0)
    if a.v2:
        from torchvision.transforms import v2
        steps = [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor()]
    else:
        steps = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.PILToTensor()]
    if a.rand_augment is not None:
        from torchvision.transforms import v2
        steps.append(v2.RandAugment(num_ops=a.rand_ops, magnitude=a.rand_augment))
    tf = transforms.Compose(steps)
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers, persistent_workers=a.workers > 0)

    def batches():                       # endless: epoch after epoch
        while True:
            yield from dl

    it = batches()
    for _ in range(a.warmup):
        next(it)
    start = time.perf_counter()
    samples = 0
    for _ in range(a.batches):
        images, labels = next(it)
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 224, 224)
        samples += images.shape[0]
    seconds = time.perf_counter() - start

    rate = samples / seconds
    print(json.dumps({"loader": "torch" + (" v2" if a.v2 else ""), "workers": a.workers, "rand_augment": a.rand_augment, "batch": a.batch, "samples": samples,
                      "seconds": round(seconds, 3), "samples_per_s": round(rate, 1),
                      "per_core": round(rate / max(a.workers, 1), 1), "cpus": os.cpu_count(),
                      "torch": torch.__version__, "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
