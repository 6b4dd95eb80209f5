"""Golden data for tests/models/vit_test.cpp and convnext_test.cpp: torchvision's ViT and ConvNeXt, and
timm's position-embedding resampling, on the Python side.

    python vit_convnext_golden.py [OUT]      writes tests/golden/vit_convnext_golden.h (or OUT): for a small
                                             torchvision VisionTransformer and ConvNeXt (GOLDEN_MODELS), 10
                                             classes, with every floating-point state-dict entry and the
                                             input filled by resnet_golden.py's integer formula (which C++
                                             computes too: tests/models/torchvision_golden.cpp), the logits in
                                             eval mode and in train mode (dropout 0, stochastic depth 0),
                                             and torch.utils.flop_counter's forward FLOPs for one sample;
                                             and timm's resample_abs_pos_embed of a formula-filled position
                                             embedding to other grids (RESIZE_CASES)
    python vit_convnext_golden.py make DIR   builds the two small models with a fixed seed (torchvision's
                                             initialisation, layer_scale and the class token made
                                             non-trivial), writes DIR/torchvision_ARCH.pt (the state dict),
                                             DIR/input_ARCH.pt and DIR/torchvision_logits_ARCH.pt (eval mode)
    python vit_convnext_golden.py check DIR ARCH
                                             loads DIR/stoker_ARCH.pt (Stoker's save_state_dict) into the
                                             same torchvision model with load_state_dict(strict=True) and
                                             writes its eval-mode logits on DIR/input_ARCH.pt to
                                             DIR/python_logits_ARCH.pt
    python vit_convnext_golden.py count      prints "NAME PARAMETERS" for torchvision's vit_b_16, vit_b_32,
                                             vit_l_16, convnext_tiny, convnext_small and convnext_base (built
                                             on the meta device: nothing is allocated)

ARCH is vit or convnext. Run with the libtorch venv's Python (torchvision and timm come with
`bash bench/setup.sh`), from the repository root:
    ~/.cache/stoker/venv-torch-2.11.0/bin/python tests/golden/vit_convnext_golden.py
"""
import math
import os
import sys
import warnings

warnings.simplefilter("ignore")  # torch's notice about a missing NumPy

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from torchvision.models.convnext import CNBlockConfig, ConvNeXt  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_golden import golden_input, golden_value, name_key, unit  # noqa: E402

from timm.layers import resample_abs_pos_embed  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COMMAND = "~/.cache/stoker/venv-torch-2.11.0/bin/python tests/golden/vit_convnext_golden.py"
CLASSES = 10

# (Stoker's model type, its keys, input shape). Must match what tests/models/{vit,convnext}_test.cpp
# build from the header's `model` line (they parse it as the YAML of `model:`).
VIT = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
CONVNEXT = dict(widths=[8, 16, 24, 32], depths=[1, 1, 2, 1])
GOLDEN_MODELS = [("vit", VIT, (2, 3, 32, 32)), ("convnext", CONVNEXT, (2, 3, 64, 48))]

# resample_abs_pos_embed cases: (old grid, new grid, old grid given to timm), dim 6, one class token.
RESIZE_DIM = 6
RESIZE_CASES = [((4, 4), (6, 6), False), ((4, 4), (3, 3), False), ((4, 4), (2, 5), False), ((2, 4), (3, 5), True)]


def build(arch, keys=None):
    if arch == "vit":
        k = dict(VIT if keys is None else keys)
        return VisionTransformer(num_classes=CLASSES, **k)
    k = dict(CONVNEXT if keys is None else keys)
    widths, depths = k["widths"], k["depths"]
    setting = [CNBlockConfig(w, widths[i + 1] if i + 1 < len(widths) else None, d)
               for i, (w, d) in enumerate(zip(widths, depths))]
    return ConvNeXt(setting, num_classes=CLASSES)


def model_yaml(arch, keys):
    items = [f"type: {arch}"]
    for name, value in keys.items():
        if name == "image_size":
            continue  # Stoker takes it from the input
        items.append(f"{name}: [{', '.join(str(v) for v in value)}]" if isinstance(value, list) else f"{name}: {value}")
    return "{" + ", ".join(items) + "}"


def formula_filled(arch):
    model = build(arch)
    filled = 0
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(golden_value(name, tuple(tensor.shape)))
                filled += 1
    return model, filled


def forward_flops(model, sample_shape):
    """Forward FLOPs of one sample, attention included: torch.utils.flop_counter counts the math
    backend's matrix products (it has no formula for the CPU's fused kernel), in train mode (the eval
    mode's fused nn.MultiheadAttention path is not counted either; dropout is 0)."""
    model.train()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        model(torch.zeros((1,) + tuple(sample_shape)))
    return counter.get_total_flops()


def resize_input(old_grid):
    n = (1 + old_grid[0] * old_grid[1]) * RESIZE_DIM
    return unit(n, name_key("pos_embedding")).float().reshape(1, -1, RESIZE_DIM)


def numbers(values, indent):
    lines = []
    for i in range(0, len(values), 4):
        chunk = ", ".join(f"{v:.17g}" for v in values[i:i + 4])
        lines.append(f"{indent}{chunk}{',' if i + 4 < len(values) else ''}")
    return lines


def header_lines():
    lines = [
        f"// Generated by tests/golden/vit_convnext_golden.py with torch {torch.__version__}, torchvision "
        f"{torchvision.__version__} and timm's resample_abs_pos_embed; do not edit by hand.",
        f"// Regenerate from the repository root: {COMMAND}",
        "// torchvision's ViT and ConvNeXt with every floating-point state-dict entry and the input filled by",
        "// resnet_golden.py's formula; timm's resampling of a formula-filled position embedding.",
        "#pragma once",
        "",
        "#include <cstdint>",
        "#include <string>",
        "#include <vector>",
        "",
        "namespace stoker::golden {",
        "",
        "struct FamilyGolden {",
        "  std::string model;                 // the YAML of `model:` that builds the same network in Stoker",
        "  std::vector<int64_t> input_shape;  // N, C, H, W",
        "  int64_t num_classes;",
        "  int64_t filled_tensors;            // floating-point state-dict entries the formula filled",
        "  double forward_flops;              // torch.utils.flop_counter, one sample (an integer)",
        "  std::vector<double> eval_logits;   // N x num_classes, row-major",
        "  std::vector<double> train_logits;",
        "};",
        "",
        "struct ResizeGolden {",
        "  std::vector<int64_t> old_grid, new_grid;",
        "  bool old_grid_given;              // passed to timm (else it assumes a square)",
        "  int64_t dim;",
        "  std::vector<double> resized;       // [1, 1 + new_h * new_w, dim]",
        "};",
        "",
        "inline const std::vector<FamilyGolden>& family_goldens() {",
        "  static const std::vector<FamilyGolden> all = {",
    ]
    for arch, keys, shape in GOLDEN_MODELS:
        model, filled = formula_filled(arch)
        x = golden_input(shape)
        with torch.no_grad():
            model.eval()
            eval_logits = model(x).flatten().tolist()
            model.train()
            train_logits = model(x).flatten().tolist()
        flops = forward_flops(model, shape[1:])
        dims = ", ".join(str(d) for d in shape)
        lines.append(f'      {{"{model_yaml(arch, keys)}", {{{dims}}}, {CLASSES}, {filled}, {flops},')
        lines += ["       {"] + numbers(eval_logits, "        ") + ["       },", "       {"]
        lines += numbers(train_logits, "        ") + ["       }},"]
    lines += ["  };", "  return all;", "}", "", "inline const std::vector<ResizeGolden>& resize_goldens() {",
              "  static const std::vector<ResizeGolden> all = {"]
    for old, new, given in RESIZE_CASES:
        resized = resample_abs_pos_embed(resize_input(old), list(new), list(old) if given else None,
                                         num_prefix_tokens=1)
        lines.append(f"      {{{{{old[0]}, {old[1]}}}, {{{new[0]}, {new[1]}}}, {'true' if given else 'false'}, "
                     f"{RESIZE_DIM},")
        lines += ["       {"] + numbers(resized.flatten().tolist(), "        ") + ["       }},"]
    lines += ["  };", "  return all;", "}", "", "}  // namespace stoker::golden", ""]
    return lines


def make(folder):
    torch.manual_seed(1234)
    for arch, _, shape in GOLDEN_MODELS:
        model = build(arch)
        with torch.no_grad():
            # Zero-initialised or constant entries made non-trivial, so that they must come across.
            for name, tensor in model.state_dict().items():
                if name.endswith("layer_scale") or name == "class_token" or name.startswith("heads.head"):
                    tensor.normal_(0.0, 0.5)
        model.eval()
        x = torch.randn(shape)
        with torch.no_grad():
            logits = model(x)
        torch.save(model.state_dict(), os.path.join(folder, f"torchvision_{arch}.pt"))
        torch.save(x, os.path.join(folder, f"input_{arch}.pt"))
        torch.save(logits, os.path.join(folder, f"torchvision_logits_{arch}.pt"))


def check(folder, arch):
    model = build(arch)
    model.load_state_dict(torch.load(os.path.join(folder, f"stoker_{arch}.pt")), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(torch.load(os.path.join(folder, f"input_{arch}.pt")))
    torch.save(logits, os.path.join(folder, f"python_logits_{arch}.pt"))


def count():
    for name in ["vit_b_16", "vit_b_32", "vit_l_16", "convnext_tiny", "convnext_small", "convnext_base"]:
        with torch.device("meta"):
            model = getattr(torchvision.models, name)()
        print(name, sum(p.numel() for p in model.parameters()))


def main():
    torch.set_num_threads(1)
    args = sys.argv[1:]
    if args == ["count"]:
        return count()
    if len(args) == 2 and args[0] == "make":
        return make(args[1])
    if len(args) == 3 and args[0] == "check" and args[2] in ("vit", "convnext"):
        return check(args[1], args[2])
    if len(args) > 1 or (args and args[0] in ("make", "check", "count")):
        sys.exit("usage: vit_convnext_golden.py [OUT] | make DIR | check DIR vit|convnext | count")
    out = args[0] if args else os.path.join(HERE, "vit_convnext_golden.h")
    with open(out, "w") as f:
        f.write("\n".join(header_lines()))


if __name__ == "__main__":
    main()
