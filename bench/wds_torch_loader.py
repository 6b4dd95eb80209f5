#!/usr/bin/env python3
"""bench/wds_torch_loader.py: the Python peer of `trainer bench-data` on WebDataset shards (issue 21).

Python's webdataset package reads the shards (tar streams, one shard at a time per worker, resampled
so that every worker always has a shard, whatever their number) -> a shuffle buffer of 1000 -> PIL
decode -> torchvision RandomResizedCrop(224) -> RandomHorizontalFlip -> PILToTensor (uint8, no
normalisation: the CPU work Stoker's loader does), batched by torch.utils.data.DataLoader with N
workers (PyTorch's defaults otherwise: each worker runs torch with 1 thread). The first --warmup
batches (worker start-up, first reads) are not timed. Prints one JSON line:
  samples_per_s  timed samples / timed seconds
  cpu_cores      CPU seconds (user + system) of this process and its workers over the timed part,
                 per wall second (read from /proc/<pid>/stat of each)
  per_core       samples_per_s / cpu_cores: the rate one core sustains, steadier than samples_per_s
                 on a machine others use too
  seconds        timed wall-clock seconds

  wds_torch_loader.py --shards 'DIR/train-{000000..000003}.tar' --workers N [--batch 64] [--batches 30]
"""
import argparse
import json
import os
import time

import torch
import torchvision
import webdataset as wds
from torchvision import transforms


def cpu_seconds(pids):
    """User + system CPU seconds of `pids` (those still running)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15)
    return total


def children():
    """This process's child processes (the DataLoader's workers)."""
    me = str(os.getpid())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    out.append(int(entry))
        except OSError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", required=True, help="brace pattern or ::-joined list of tar files")
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=30, help="timed batches")
    ap.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    a = ap.parse_args()

    torch.manual_seed(0)
    tf = transforms.Compose([transforms.RandomResizedCrop(224),
                             transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = (wds.WebDataset(a.shards, resampled=True, shardshuffle=False, seed=0)
          .shuffle(1000)
          .decode("pil")
          .to_tuple("jpg;jpeg;png", "cls")
          .map_tuple(tf, int))
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                                     persistent_workers=a.workers > 0)
    it = iter(dl)  # endless: the shards are resampled
    for _ in range(a.warmup):
        next(it)
    pids = [os.getpid()] + children()
    cpu0 = cpu_seconds(pids)
    start = time.perf_counter()
    samples = 0
    for _ in range(a.batches):
        images, labels = next(it)
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 224, 224)
        samples += images.shape[0]
    seconds = time.perf_counter() - start
    cores = (cpu_seconds(pids) - cpu0) / seconds

    rate = samples / seconds
    print(json.dumps({"loader": "webdataset+torch", "workers": a.workers, "batch": a.batch, "samples": samples,
                      "seconds": round(seconds, 3), "samples_per_s": round(rate, 1),
                      "cpu_cores": round(cores, 2), "per_core": round(rate / max(cores, 1e-9), 1),
                      "cpus": os.cpu_count(), "torch": torch.__version__,
                      "torchvision": torchvision.__version__, "webdataset": getattr(wds, "__version__", "?")}))


if __name__ == "__main__":
    main()
