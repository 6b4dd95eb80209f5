"""The training step of a torchvision model in a plain PyTorch eager loop: the peer that
bench/run_families_bench.sh times Stoker's `trainer bench-step --config bench/step_families.yaml` against,
and that the GPU pass (scripts/gpu_pass.sh, stage torchvision) times at real size on the GPU.

    python bench/torchvision_step.py FAMILY [FAMILY ...] [--precision fp32|bf16-mixed] [--steps N] [--warmup N]
        [--device cpu|cuda] [--batch N] [--image-size N] [--classes N]

FAMILY is vit, convnext or a named torchvision model (vit_b_16, convnext_tiny, efficientnet_b0,
mobilenet_v3_small, ...). `vit` and `convnext` are the recipe's small networks (`vit`:
VisionTransformer(32, patch 4, 4 layers, 3 heads, width 96, MLP 384); `convnext`: ConvNeXt widths
32/64/128/256, depths 1/1/3/1); the named ones are at torchvision's defaults (vit_b_16 at --image-size).
Defaults: 10 classes, batch 32 of 32x32 RGB already on the device, on the CPU; SGD (momentum 0.9,
Nesterov, no weight decay), cross-entropy; bf16-mixed under torch.autocast. Warm-up steps first, then the
timed ones; prints one JSON line per family with ms_per_step (and on CUDA peak_memory_mb: the caching
allocator's reserved bytes at the peak, as Stoker's bench-step reports it).
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


def build(family, image_size, classes):
    if family == "vit":
        return VisionTransformer(32, 4, 4, 3, 96, 384, num_classes=classes)
    if family.startswith("vit_"):
        return getattr(torchvision.models, family)(num_classes=classes, image_size=image_size)
    if family != "convnext":
        return getattr(torchvision.models, family)(num_classes=classes)
    widths, depths = [32, 64, 128, 256], [1, 1, 3, 1]
    return ConvNeXt([CNBlockConfig(w, widths[i + 1] if i + 1 < len(widths) else None, d)
                     for i, (w, d) in enumerate(zip(widths, depths))], num_classes=classes)


def time_family(family, a):
    device = torch.device(a.device)
    torch.manual_seed(1)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as Stoker's runs on CUDA
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = build(family, a.image_size, a.classes).train().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=device)
    y = torch.randint(a.classes, (a.batch,), device=device)
    mixed = a.precision == "bf16-mixed"

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(a.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    seconds = time.perf_counter() - start
    out = {"model": family, "implementation": "torchvision eager", "precision": a.precision, "batch_size": a.batch,
           "image_size": a.image_size, "ms_per_step": 1e3 * seconds / a.steps, "device": str(device),
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    if device.type == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_reserved(device) / 1e6
    print(json.dumps(out), flush=True)
    del model, optimizer, x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", nargs="+", help="vit, convnext, or a torchvision model's name (vit_b_16, "
                        "convnext_tiny, efficientnet_b0, mobilenet_v3_small, ...)")
    parser.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    a = parser.parse_args()
    if a.steps < 1:
        parser.error("--steps must be at least 1")
    for family in a.family:
        if family not in ("vit", "convnext") and not hasattr(torchvision.models, family):
            parser.error(f"unknown family {family}: vit, convnext or a torchvision.models name")
    for family in a.family:
        time_family(family, a)


if __name__ == "__main__":
    main()
