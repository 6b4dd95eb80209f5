#!/usr/bin/env python3
"""bench/make_imagefolder.py: a deterministic, ImageNet-like ImageFolder for the data-pipeline benchmark.

Writes DIR/<class>/<n>.jpg: 500x375 landscape (every 4th image 375x500 portrait), JPEG 4:2:0 at
quality 95 like many ImageNet files, with natural-looking content: smooth colour gradients, soft
random shapes, a mid-frequency texture and mild sensor noise, tuned so files average about 100 KB.
Same --seed, same bytes. Does nothing if DIR already holds exactly the expected files.

  make_imagefolder.py --out DIR [--classes 10] [--per-class 100] [--seed 0]
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

QUALITY = 95         # many ImageNet (Flickr) JPEGs are saved at 90-96
NOISE_SIGMA = 4.0    # per-pixel sensor noise (grey levels)
TEXTURE_AMP = 28.0   # multi-scale texture amplitude (grey levels): the main knob for file size


def smooth_field(rng, w, h, cells, channels, amp):
    """Random values on a coarse grid, bicubically upsampled: smooth gradients or texture."""
    gw, gh = max(2, w // cells), max(2, h // cells)
    grid = rng.uniform(-amp, amp, size=(gh, gw, channels)).astype(np.float32)
    up = [np.asarray(Image.fromarray(grid[..., c], mode="F").resize((w, h), Image.BICUBIC))
          for c in range(channels)]
    return np.stack(up, axis=-1)


def make_image(rng, w, h):
    base = rng.uniform(40, 215, size=3).astype(np.float32)
    img = base + smooth_field(rng, w, h, cells=160, channels=3, amp=60.0)     # sky/ground gradients

    layer = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(layer)
    for _ in range(rng.integers(8, 24)):                                       # objects
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        x0, y0 = rng.uniform(-0.2, 1.0) * w, rng.uniform(-0.2, 1.0) * h
        sw, sh = rng.uniform(0.05, 0.5) * w, rng.uniform(0.05, 0.5) * h
        kind = rng.integers(3)
        if kind == 0:
            draw.ellipse([x0, y0, x0 + sw, y0 + sh], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x0 + sw, y0 + sh], fill=colour)
        else:
            pts = [(x0 + rng.uniform(0, sw), y0 + rng.uniform(0, sh)) for _ in range(rng.integers(3, 7))]
            draw.polygon(pts, fill=colour)
    layer = layer.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.8, 2.5))))  # soft edges

    img = np.asarray(layer, dtype=np.float32)
    detail = rng.uniform(0.6, 1.4)                 # some photos are busier than others
    for cells in (2, 4, 8, 16, 32):                # texture at every scale: foliage, fabric, grain
        img += smooth_field(rng, w, h, cells, channels=1, amp=detail * TEXTURE_AMP)
    img += rng.normal(0.0, NOISE_SIGMA, size=img.shape).astype(np.float32)      # sensor noise
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    names = [f"class{c:03d}" for c in range(a.classes)]
    paths = [os.path.join(a.out, name, f"{n}.jpg") for name in names for n in range(a.per_class)]
    stamp = os.path.join(a.out, ".complete")
    want = json.dumps({"classes": a.classes, "per_class": a.per_class, "seed": a.seed,
                       "quality": QUALITY, "noise": NOISE_SIGMA, "texture": TEXTURE_AMP})
    done = os.path.exists(stamp) and open(stamp).read() == want and all(map(os.path.exists, paths))
    if not done:
        for c, name in enumerate(names):
            os.makedirs(os.path.join(a.out, name), exist_ok=True)
            for n in range(a.per_class):
                rng = np.random.default_rng([a.seed, c, n])       # per-image stream: order-independent
                w, h = (375, 500) if n % 4 == 3 else (500, 375)
                make_image(rng, w, h).save(os.path.join(a.out, name, f"{n}.jpg"),
                                           quality=QUALITY, subsampling="4:2:0")
        with open(stamp, "w") as f:
            f.write(want)

    sizes = [os.path.getsize(p) for p in paths]
    print(json.dumps({"dir": a.out, "images": len(paths), "generated": not done,
                      "mean_kb": round(sum(sizes) / len(sizes) / 1000, 1),
                      "min_kb": round(min(sizes) / 1000, 1), "max_kb": round(max(sizes) / 1000, 1)}))


if __name__ == "__main__":
    sys.exit(main())
