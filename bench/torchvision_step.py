"""The training step of a torchvision model in a plain PyTorch eager loop: the peer that
bench/run_families_bench.sh times Stoker's `trainer bench-step --config bench/step_families.yaml` against.

    python bench/torchvision_step.py FAMILY [--precision fp32|bf16-mixed] [--steps N] [--warmup N]

FAMILY is vit, convnext or a named torchvision model of the EfficientNet and MobileNetV3 families
(efficientnet_b0, mobilenet_v3_small, ...). The same network as the recipe's (`vit`:
VisionTransformer(32, patch 4, 4 layers, 3 heads, width 96, MLP 384); `convnext`: ConvNeXt widths
32/64/128/256, depths 1/1/3/1; the named ones at torchvision's defaults), 10 classes, batch 32 of 32x32 RGB
already in memory, SGD (momentum 0.9, Nesterov, no weight decay), cross-entropy; bf16-mixed under
torch.autocast. Warm-up steps first, then the timed ones; prints one JSON line with ms_per_step.
Threads: PyTorch's default (one per core), as the recipe's run.threads: 0.
"""
import argparse
import json
import time
import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.models.convnext import CNBlockConfig, ConvNeXt  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402


def build(family):
    if family == "vit":
        return VisionTransformer(32, 4, 4, 3, 96, 384, num_classes=10)
    if family != "convnext":
        return getattr(torchvision.models, family)(num_classes=10)
    widths, depths = [32, 64, 128, 256], [1, 1, 3, 1]
    return ConvNeXt([CNBlockConfig(w, widths[i + 1] if i + 1 < len(widths) else None, d)
                     for i, (w, d) in enumerate(zip(widths, depths))], num_classes=10)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=["vit", "convnext", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
                                           "efficientnet_b3", "mobilenet_v3_small", "mobilenet_v3_large"])
    parser.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    a = parser.parse_args()
    torch.manual_seed(1)
    model = build(a.family).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(32, 3, 32, 32)
    y = torch.randint(10, (32,))
    mixed = a.precision == "bf16-mixed"

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(a.warmup):
        step()
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    seconds = time.perf_counter() - start
    print(json.dumps({"model": a.family, "implementation": "torchvision eager", "precision": a.precision,
                      "batch_size": 32, "ms_per_step": 1e3 * seconds / a.steps, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
