"""Python's side of the fine-tuning tests (tests/models/weights/safetensors_test.cpp, pretrained tests,
tests/recipe/torchscript_run_test.cpp): files written by the libraries people fine-tune with, and
checks of what Stoker writes.

    python finetune_python.py safetensors-write DIR
        DIR/python.safetensors (safetensors.torch.save_file: float32, float16, bfloat16, int64, uint8,
        bool, a 0-d and an empty tensor, with metadata) and DIR/python_expected.pt (the same dict,
        torch.save), for the reader's test
    python finetune_python.py safetensors-check FILE EXPECTED
        loads FILE with safetensors.torch.load_file and EXPECTED with torch.load; exits 1 unless equal
    python finetune_python.py checkpoints DIR
        torchvision's resnet18 (1000 classes, as its ImageNet weights; seeded) as DIR/tv_resnet18.pth, a
        Lightning-style checkpoint DIR/lightning.ckpt ({"epoch", "global_step", "state_dict" with keys
        "model.<name>", "hyper_parameters": an argparse.Namespace, "optimizer_states"}), a timm-style
        training checkpoint DIR/timm_train.pth.tar ({"epoch", "arch", "state_dict", "args": a Namespace,
        "metric": a numpy float}), a DDP one DIR/ddp.pth ("module." prefixes), the model pickled whole
        DIR/whole_model.pth, DIR/tv_resnet18.safetensors, and DIR/legacy.pth (torch.save's pre-1.6 format)
    python finetune_python.py script NAME SIZE CLASSES OUT
        the network NAME scripted with torch.jit.script and saved to OUT: tv_resnet18 (torchvision),
        timm_resnet (timm resnet10t), convnext_atto (timm), vit (timm vit_tiny_patch16_224 at img_size
        SIZE, patch 8), traced_resnet (torchvision resnet18 traced, not scripted), two_inputs (a module
        whose forward takes two tensors)
    python finetune_python.py script-all SIZE CLASSES DIR
        every network above, as DIR/NAME.pt (one Python start-up for all)
"""
import argparse
import os
import sys
import warnings

warnings.simplefilter("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def safetensors_write(out):
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(3)
    tensors = {
        "conv.weight": torch.randn(4, 3, 3, 3, generator=g),
        "half": torch.randn(5, 2, generator=g).half(),
        "bf16": torch.randn(7, generator=g).bfloat16(),
        "steps": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "bytes": torch.arange(10, dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }
    save_file(tensors, os.path.join(out, "python.safetensors"), metadata={"format": "pt"})
    torch.save(tensors, os.path.join(out, "python_expected.pt"))


def safetensors_check(path, expected_path):
    from safetensors.torch import load_file
    got, want = load_file(path), torch.load(expected_path)
    if list(got) != list(want) and sorted(got) != sorted(want):
        sys.exit(f"keys differ: {sorted(got)} vs {sorted(want)}")
    for k in want:
        if got[k].dtype != want[k].dtype or got[k].shape != want[k].shape or not torch.equal(got[k], want[k]):
            sys.exit(f"tensor {k} differs")


def checkpoints(out):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    sd = model.state_dict()
    torch.save(sd, os.path.join(out, "tv_resnet18.pth"))
    namespace = argparse.Namespace(lr=0.1, layers=[1, 2], name="x", nested={"a": (1, 2.5)})
    lightning = {
        "epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.4.0",
        "state_dict": {"model." + k: v for k, v in sd.items()},
        "hyper_parameters": namespace,
        "optimizer_states": [{"state": {0: {"momentum_buffer": torch.zeros(3)}}, "param_groups": [{"lr": 0.1}]}],
        "callbacks": {"ModelCheckpoint{'monitor': 'val_loss'}": {"best_model_score": torch.tensor(0.5)}},
    }
    torch.save(lightning, os.path.join(out, "lightning.ckpt"))
    timm_train = {"epoch": 7, "arch": "resnet18", "state_dict": sd, "args": namespace,
                  "metric": np.float64(71.5), "version": 2}
    torch.save(timm_train, os.path.join(out, "timm_train.pth.tar"))
    torch.save({"module." + k: v for k, v in sd.items()}, os.path.join(out, "ddp.pth"))
    torch.save(model, os.path.join(out, "whole_model.pth"))
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "tv_resnet18.safetensors"))
    torch.save(sd, os.path.join(out, "legacy.pth"), _use_new_zipfile_serialization=False)


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x, y):
        return self.fc(x) + y


NETWORKS = ["tv_resnet18", "timm_resnet", "convnext_atto", "vit", "traced_resnet", "two_inputs"]


def script(name, size, classes, out):
    import timm
    import torchvision
    torch.manual_seed(0)
    if name == "tv_resnet18":
        module = torch.jit.script(torchvision.models.resnet18(num_classes=classes))
    elif name == "timm_resnet":
        module = torch.jit.script(timm.create_model("resnet10t", num_classes=classes))
    elif name == "convnext_atto":
        module = torch.jit.script(timm.create_model("convnext_atto", num_classes=classes))
    elif name == "vit":
        module = torch.jit.script(timm.create_model("vit_tiny_patch16_224", num_classes=classes, img_size=size,
                                                    patch_size=8))
    elif name == "traced_resnet":
        model = torchvision.models.resnet18(num_classes=classes).train()
        module = torch.jit.trace(model, torch.randn(2, 3, size, size))
    elif name == "two_inputs":
        module = torch.jit.script(TwoInputs())
    else:
        sys.exit(f"unknown network {name}")
    module.save(out)


def main():
    command = sys.argv[1]
    if command == "safetensors-write":
        safetensors_write(sys.argv[2])
    elif command == "safetensors-check":
        safetensors_check(sys.argv[2], sys.argv[3])
    elif command == "checkpoints":
        checkpoints(sys.argv[2])
    elif command == "script":
        script(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif command == "script-all":
        for name in NETWORKS:
            script(name, int(sys.argv[2]), int(sys.argv[3]), os.path.join(sys.argv[4], name + ".pt"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
