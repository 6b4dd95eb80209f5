"""Loads a folder `trainer export --format safetensors` wrote back into timm, strictly, and compares its logits.

    python tests/models/weights/timm_load_export.py FOLDER EXPECTED

FOLDER holds model.safetensors and config.json; timm builds config.json's architecture with its model_args,
load_state_dict(strict=True) takes the file, and its eval-mode logits for EXPECTED's `input` must equal
EXPECTED's `logits` (Stoker's) within 1e-4 of the largest. Prints the worst relative difference; exits 1 otherwise.
"""
import json
import os
import sys
import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
import timm  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


def main():
    folder, expected = sys.argv[1], load_file(sys.argv[2])
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    args = dict(config.get("model_args", {}))
    args["num_classes"] = config["num_classes"]
    model = timm.create_model(config["architecture"], pretrained=False, **args)
    model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(expected["input"])
    want = expected["logits"]
    worst = float((logits - want).abs().max() / max(float(want.abs().max()), 1e-12))
    print(f"{config['architecture']}: {config['num_classes']} classes, worst relative difference {worst:.3g}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
