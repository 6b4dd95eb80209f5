"""Golden data for tests/models/resnet_test.cpp: torchvision's ResNet-18 on the Python side.

    python resnet_golden.py make DIR   builds torchvision.models.resnet18(num_classes=10) with a fixed
                                       seed (BN statistics made non-trivial), writes
                                       DIR/torchvision_resnet18.pt (its state_dict), DIR/input.pt
                                       (a [2,3,64,64] input) and DIR/torchvision_logits.pt (its
                                       eval-mode logits on that input)
    python resnet_golden.py check DIR  loads DIR/stoker_resnet18.pt (written by Stoker's
                                       save_state_dict) into torchvision.models.resnet18(num_classes=10)
                                       with load_state_dict(strict=True) and writes its eval-mode
                                       logits on DIR/input.pt to DIR/python_logits.pt

Every file is written with torch.save and read with plain torch.load (weights_only=True).
"""
import os
import sys

import torch
import torchvision


def make(folder):
    torch.manual_seed(1234)
    model = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        # Random affine BN parameters and a few training-mode passes, so that eval mode uses
        # running statistics that are neither the initial 0/1 nor the batch's own.
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
        model.train()
        for _ in range(3):
            model(torch.randn(4, 3, 64, 64) * 2 + 0.5)
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        logits = model(x)
    torch.save(model.state_dict(), os.path.join(folder, "torchvision_resnet18.pt"))
    torch.save(x, os.path.join(folder, "input.pt"))
    torch.save(logits, os.path.join(folder, "torchvision_logits.pt"))


def check(folder):
    model = torchvision.models.resnet18(num_classes=10)
    state = torch.load(os.path.join(folder, "stoker_resnet18.pt"))
    model.load_state_dict(state, strict=True)
    model.eval()
    x = torch.load(os.path.join(folder, "input.pt"))
    with torch.no_grad():
        logits = model(x)
    torch.save(logits, os.path.join(folder, "python_logits.pt"))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit("usage: resnet_golden.py make|check DIR")
    torch.set_num_threads(1)
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
