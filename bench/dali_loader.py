#!/usr/bin/env python3
"""bench/dali_loader.py: NVIDIA DALI's CPU pipeline (device_id=None) on the Python loader benchmark's work:
an ImageFolder's JPEGs read and shuffled (fn.readers.file), decoded with a random-resized crop
(fn.decoders.image_random_crop: area 0.08-1, aspect 3/4-4/3, as torchvision's RandomResizedCrop), resized to
224 x 224, flipped with probability 0.5, uint8 HWC batches of 64, handed to Python as torch tensors
(DALIGenericIterator), --threads DALI threads. Prints one JSON line in bench/torch_dataloader.py's form.

  python bench/dali_loader.py --root DIR --threads N [--batches 40] [--warmup 5]
"""
import argparse
import json
import os
import time

import torch
import nvidia.dali as dali
import nvidia.dali.fn as fn
import nvidia.dali.types as types
from nvidia.dali import pipeline_def
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="a folder holding <class>/*.jpg")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=40, help="timed batches")
    ap.add_argument("--warmup", type=int, default=5, help="untimed batches first")
    a = ap.parse_args()

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=0)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=a.root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    pipe = pipeline()
    pipe.build()
    it = DALIGenericIterator([pipe], ["images", "labels"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def batches():  # endless: epoch after epoch
        while True:
            for out in it:
                yield out[0]["images"], out[0]["labels"]

    gen = batches()
    for _ in range(a.warmup):
        next(gen)
    start = time.perf_counter()
    samples = 0
    for _ in range(a.batches):
        images, labels = next(gen)
        assert images.dtype == torch.uint8 and tuple(images.shape[1:]) == (224, 224, 3), images.shape
        samples += images.shape[0]
    seconds = time.perf_counter() - start
    rate = samples / seconds
    print(json.dumps({"loader": "dali cpu", "workers": a.threads, "batch": a.batch, "samples": samples,
                      "seconds": round(seconds, 3), "samples_per_s": round(rate, 1),
                      "per_core": round(rate / max(a.threads, 1), 1), "cpus": os.cpu_count(),
                      "dali": dali.__version__}))


if __name__ == "__main__":
    main()
