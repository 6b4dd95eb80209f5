#!/usr/bin/env python3
"""bench/stoker_loader.py: stoker.Loader from Python on the data-pipeline benchmark's work (docs/BENCHMARKS.md):
bench/data_imagefolder.yaml's training split (decode, random-resized-crop 224, flip), uint8 batches of 64,
--threads loader threads, epochs back to back, the first --warmup batches untimed. Prints one JSON line
in bench/torch_dataloader.py's form, so that bench/run_python_loader_bench.sh sets them side by side.

  PYTHONPATH=build/release/python stoker_loader.py --root DIR --threads N [--batches 40] [--warmup 5]
"""
import argparse
import json
import os
import time

import stoker


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="a folder holding train/<class>/*.jpg")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batches", type=int, default=40, help="timed batches")
    ap.add_argument("--warmup", type=int, default=5, help="untimed batches first")
    a = ap.parse_args()
    recipe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_imagefolder.yaml")
    loader = stoker.Loader.from_recipe(recipe, overrides=[f"data.root={a.root}", f"data.workers={a.threads}"],
                                       uint8=True)

    def batches():  # endless: epoch after epoch
        while True:
            yield from loader

    it = batches()
    for _ in range(a.warmup):
        next(it)
    loader.stats()  # the timed stretch's stages only
    cpu0, start = os.times(), time.perf_counter()
    samples = 0
    for _ in range(a.batches):
        images, labels = next(it)
        assert images.shape[1:] == (224, 224, 3)
        samples += images.shape[0]
    seconds = time.perf_counter() - start
    cpu1 = os.times()
    cores = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / seconds
    stats = loader.stats()
    loader.close()
    rate = samples / seconds
    print(json.dumps({"loader": "stoker.Loader", "workers": a.threads, "batch": 64, "samples": samples,
                      "seconds": round(seconds, 3), "samples_per_s": round(rate, 1), "cpu_cores": round(cores, 2),
                      "wait_us": round(1e6 * stats["wait_s"] / max(1, samples), 1), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
