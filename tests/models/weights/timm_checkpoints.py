"""timm checkpoints for tests/models/weights/timm_test.cpp, made at test time (not checked in).

    python tests/models/weights/timm_checkpoints.py OUT

For each case below, OUT/<case>/ is a Hugging Face Hub model folder as timm writes one
(timm.models._hub.save_for_hf: config.json with architecture, num_classes and pretrained_cfg, and
model.safetensors and/or pytorch_model.bin), of a timm model with random weights, every parameter that timm
initialises to a constant (batch-norm weights and biases, ConvNeXt's layer scale) drawn at random, and batch-norm
running statistics measured in train mode over two random batches (so they are neither 0/1 nor the eval batch's);
and OUT/<case>/golden.safetensors holds inputs (input_0, input_1: several sizes where the family allows) and timm's
eval-mode float32 logits for them (logits_0, logits_1).
OUT/keys.json lists, for timm architectures too large to make at test time (ViT-B/L, ConvNeXt-S/B, ResNet-101),
every state-dict key with its shape, from a model built on the meta device (no memory, no weights).

Why generated, not checked in: a full ResNet-50 is 100 MB and a ViT-L/16 1.2 GB, and the point is timm's own
files; the test skips, saying so, where timm is not installed (bash bench/setup.sh installs it).
"""
import json
import os
import sys
import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
import timm  # noqa: E402
from timm.models._hub import save_for_hf  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

CLASSES = 10
# (case, timm architecture, timm kwargs, formats, input sizes (H, W)). Must match kCases in timm_test.cpp.
CASES = [
    ("resnet18", "resnet18", {}, "both", [(64, 64), (48, 80)]),
    ("resnet34", "resnet34", {}, False, [(64, 64)]),
    ("resnet50", "resnet50", {}, True, [(64, 64), (40, 56)]),
    ("convnext_tiny", "convnext_tiny", {}, True, [(64, 64)]),
    ("convnext_small_net", "convnext_tiny", dict(depths=(1, 1, 2, 1), dims=(8, 16, 24, 32)), "both",
     [(64, 48), (32, 32)]),
    ("vit_small_net", "vit_base_patch16_224",
     dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, dynamic_img_size=True), "both",
     [(32, 32), (48, 48)]),
    ("efficientnet_b0", "efficientnet_b0", {}, "both", [(64, 64), (48, 80)]),
    ("efficientnet_b1", "efficientnet_b1", {}, True, [(64, 64)]),
    ("efficientnet_b2", "efficientnet_b2", {}, False, [(64, 64)]),
    ("efficientnet_b3", "efficientnet_b3", {}, True, [(64, 64)]),
    ("mobilenetv3_small_100", "mobilenetv3_small_100", {}, "both", [(64, 64), (48, 80)]),
    ("mobilenetv3_large_100", "mobilenetv3_large_100", {}, "both", [(64, 64)]),
    # Refused: another architecture under the same names (ResNet-D's deep stem), a tf_ port (same keys).
    ("resnet18d", "resnet18d", {}, True, [(64, 64)]),
    ("tf_efficientnet_b0", "tf_efficientnet_b0", {}, True, [(64, 64)]),
    ("convnext_hnf_net", "convnext_tiny", dict(depths=(1, 1, 2, 1), dims=(8, 16, 24, 32), head_norm_first=True),
     True, [(64, 48)]),
]
KEY_LISTS = ["resnet101", "convnext_small", "convnext_base", "vit_base_patch16_224", "vit_base_patch32_224",
             "vit_large_patch16_224"]


def randomise(model, generator):
    """Every parameter timm initialises to one value, drawn at random (BN, LayerNorm, layer scale, zero heads)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
                else:
                    p.copy_(torch.rand(p.shape, generator=generator) * 0.5 + 0.75)


def calibrate(model, generator, size):
    """Batch-norm running statistics measured over two random batches (cumulative averages)."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None
            m.reset_running_stats()
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn((8, 3) + size, generator=generator))
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.1
    model.eval()


def make_case(out, case, arch, kwargs, formats, sizes, seed):
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=CLASSES, **kwargs)
    randomise(model, generator)
    calibrate(model, generator, sizes[0])
    folder = os.path.join(out, case)
    save_for_hf(model, folder, safe_serialization=formats)
    golden = {}
    with torch.no_grad():
        for i, (h, w) in enumerate(sizes):
            x = torch.randn((2, 3, h, w), generator=generator)
            golden[f"input_{i}"] = x
            golden[f"logits_{i}"] = model(x).float().contiguous()
    save_file(golden, os.path.join(folder, "golden.safetensors"))


def key_lists(out):
    lists = {}
    for arch in KEY_LISTS:
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False)
        lists[arch] = [[k, list(v.shape)] for k, v in model.state_dict().items()]
    with open(os.path.join(out, "keys.json"), "w") as f:
        json.dump(lists, f)


def main():
    out = sys.argv[1]
    only = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    for seed, (case, arch, kwargs, formats, sizes) in enumerate(CASES):
        if not only or case in only:
            make_case(out, case, arch, kwargs, formats, sizes, seed)
    if not only or "keys" in only:
        key_lists(out)


if __name__ == "__main__":
    main()
