"""Golden data for tests/models/efficientnet_test.cpp and tests/models/mobilenet_v3_test.cpp:
torchvision's EfficientNet and MobileNetV3 on the Python side.

    python mobile_golden.py [OUT]        writes tests/golden/mobile_golden.h (or OUT): for
                                         efficientnet_b0, mobilenet_v3_small and mobilenet_v3_large
                                         (num_classes=10, dropout and stochastic depth 0), every
                                         floating-point state-dict entry filled by resnet_golden.py's
                                         formula (golden_value), torch.utils.flop_counter's forward
                                         FLOPs of one sample, their train-mode logits on the input
                                         [4,3,64,64] (golden_batch(shape, "input")), then their
                                         eval-mode logits on that input after calibrate() on the
                                         batch [8,3,64,64] of name "calibration"; C++ computes the
                                         same (tests/models/torchvision_golden.cpp) and needs no Python
    python mobile_golden.py make DIR TYPE   builds torchvision's TYPE(num_classes=10) with a fixed
                                         seed, random batch-norm affine parameters and running
                                         statistics from calibrate(); writes DIR/torchvision_TYPE.pt
                                         (its state_dict), DIR/input_TYPE.pt ([2,3,64,64]) and
                                         DIR/torchvision_logits_TYPE.pt (its eval-mode logits)
    python mobile_golden.py check DIR TYPE  loads DIR/stoker_TYPE.pt (Stoker's save_state_dict) into
                                         torchvision's TYPE(num_classes=10) with
                                         load_state_dict(strict=True) and writes its eval-mode logits on
                                         DIR/input_TYPE.pt to DIR/python_logits_TYPE.pt
    python mobile_golden.py count        prints "TYPE PARAMETERS" for each of TYPES (torchvision's
                                         model with 1000 classes, built on the meta device)

Why the calibration: with the formula's running statistics (means near 0, variances in [1, 1.5))
eval-mode activations of these deep, narrow networks shrink block by block until every sample gives
the same logits, which would test nothing; one train-mode pass with every batch norm's momentum at 1
makes the running statistics those of a real batch, as a trained network's are.

Run with the libtorch venv's Python (torchvision comes with `bash bench/setup.sh`), from the
repository root:
    ~/.cache/stoker/venv-torch-2.11.0/bin/python tests/golden/mobile_golden.py
"""
import math
import os
import sys
import warnings

warnings.simplefilter("ignore")  # torch's notice about a missing NumPy

import torch  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_golden import golden_value, name_key, unit  # noqa: E402  the shared weight formula
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COMMAND = "~/.cache/stoker/venv-torch-2.11.0/bin/python tests/golden/mobile_golden.py"

# Every registered type of the two families (the parameter counts), and those in the header.
TYPES = ["efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
         "mobilenet_v3_small", "mobilenet_v3_large"]
GOLDEN_MODELS = ["efficientnet_b0", "mobilenet_v3_small", "mobilenet_v3_large"]
GOLDEN_CLASSES = 10
INPUT_SHAPE = (4, 3, 64, 64)
CALIBRATION_SHAPE = (8, 3, 64, 64)
# Must match tests/models/torchvision_golden.cpp (golden_batch, calibrate).


def golden_batch(shape, name):
    """A batch in (-2, 2) from the formula, keyed by `name` ("input" is resnet_golden's input)."""
    return (2.0 * unit(math.prod(shape), name_key(name))).float().reshape(shape)


def build(arch, num_classes=GOLDEN_CLASSES):
    """torchvision's ARCH without dropout and stochastic depth (the train-mode logits are then
    deterministic)."""
    kwargs = {"num_classes": num_classes, "dropout": 0.0}
    if arch.startswith("efficientnet"):
        kwargs["stochastic_depth_prob"] = 0.0
    return getattr(torchvision.models, arch)(**kwargs)


def calibrate(model, batch):
    """Running statistics := the batch's (one train-mode pass, every batch norm's momentum 1)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(batch)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum


def golden_logits(arch):
    model = build(arch)
    filled = 0
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(golden_value(name, tuple(tensor.shape)))
                filled += 1
    model.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1,) + INPUT_SHAPE[1:]))
    x = golden_batch(INPUT_SHAPE, "input")
    model.train()
    with torch.no_grad():
        train = model(x)
    calibrate(model, golden_batch(CALIBRATION_SHAPE, "calibration"))
    model.eval()
    with torch.no_grad():
        evaluated = model(x)
    return train, evaluated, filled, counter.get_total_flops()


def number_rows(values, indent):
    rows = []
    for i in range(0, len(values), 4):
        chunk = ", ".join(f"{v:.17g}" for v in values[i:i + 4])
        rows.append(f"{indent}{'{' if i == 0 else ' '}{chunk}{'}' if i + 4 >= len(values) else ''},")
    return rows


def write_header(out):
    dims = ", ".join(str(d) for d in INPUT_SHAPE)
    calibration = ", ".join(str(d) for d in CALIBRATION_SHAPE)
    lines = [
        f"// Generated by tests/golden/mobile_golden.py with torch {torch.__version__} and torchvision "
        f"{torchvision.__version__}; do not edit by hand.",
        f"// Regenerate from the repository root: {COMMAND}",
        "// Forward FLOPs, train- and eval-mode logits of torchvision's EfficientNet-B0 and MobileNetV3",
        "// (dropout and stochastic depth 0) with every floating-point state-dict entry filled by the",
        "// formula of resnet_golden.py; eval mode after calibrate() (running statistics of one batch).",
        "#pragma once",
        "",
        "#include <cstdint>",
        "#include <string>",
        "#include <vector>",
        "",
        "namespace stoker::golden {",
        "",
        "struct MobileGolden {",
        "  std::string type;                       // torchvision's and Stoker's registry name",
        "  std::vector<int64_t> input_shape;        // N, C, H, W of golden_batch(shape, \"input\")",
        "  std::vector<int64_t> calibration_shape;  // of golden_batch(shape, \"calibration\")",
        "  int64_t num_classes;",
        "  int64_t filled_tensors;                 // floating-point state-dict entries the formula filled",
        "  double forward_flops;                   // torch.utils.flop_counter, one sample (an integer)",
        "  std::vector<double> train_logits;        // N x num_classes, row-major, train mode",
        "  std::vector<double> eval_logits;         // after the calibration, eval mode",
        "};",
        "",
        "inline const std::vector<MobileGolden>& mobile_goldens() {",
        "  static const std::vector<MobileGolden> all = {",
    ]
    for arch in GOLDEN_MODELS:
        train, evaluated, filled, flops = golden_logits(arch)
        lines.append(f'      {{"{arch}", {{{dims}}}, {{{calibration}}}, {GOLDEN_CLASSES}, {filled}, {flops},')
        lines += number_rows(train.flatten().tolist(), "       ")
        rows = number_rows(evaluated.flatten().tolist(), "       ")
        rows[-1] = rows[-1][:-1] + "},"
        lines += rows
    lines += ["  };", "  return all;", "}", "", "}  // namespace stoker::golden", ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))


def make(folder, arch):
    torch.manual_seed(1234)
    model = build(arch)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    calibrate(model, torch.randn(8, 3, 64, 64) * 2 + 0.5)
    model.eval()
    x = torch.randn(2, 3, 64, 64)
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
    for arch in TYPES:
        with torch.device("meta"):
            model = getattr(torchvision.models, arch)()
        print(arch, sum(p.numel() for p in model.parameters()))


def main():
    torch.set_num_threads(1)
    args = sys.argv[1:]
    if args == ["count"]:
        count()
    elif len(args) == 3 and args[0] in ("make", "check") and args[2] in TYPES:
        {"make": make, "check": check}[args[0]](args[1], args[2])
    elif len(args) <= 1 and (not args or args[0] not in ("make", "check", "count")):
        write_header(args[0] if args else os.path.join(HERE, "mobile_golden.h"))
    else:
        sys.exit(f"usage: mobile_golden.py [OUT] | make DIR TYPE | check DIR TYPE | count; TYPE one of {TYPES}")


if __name__ == "__main__":
    main()
