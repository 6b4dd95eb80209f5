"""Golden values for tests/optim/optim_test.cpp: five steps of PyTorch's own SGD and AdamW on
fixed parameters and gradients (no random numbers, so C++ can make the same ones), with the
learning rate changed between steps. Prints one line per case: its name, then the final values of
both parameters, flattened."""
import math
import sys

import torch


def make_params():
    p0 = ((torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5.5) * 0.1).requires_grad_()
    p1 = torch.linspace(-0.3, 0.3, 4, dtype=torch.float32).requires_grad_()
    return [p0, p1]


def gradient(p, t):
    # Must match gradient() in optim_test.cpp.
    i = torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape)
    return 0.5 * torch.sin(0.7 * i + 1.3 * t) + 0.1 * p.detach()


CASES = {
    "sgd_momentum": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_plain": lambda groups: torch.optim.SGD(groups, lr=0.1),
    "adamw": lambda groups: torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.99), eps=1e-8),
}
WEIGHT_DECAY = {"sgd_momentum": 5e-4, "sgd_nesterov": 5e-4, "sgd_plain": 5e-4, "adamw": 0.05}


def main():
    torch.set_printoptions(precision=10)
    for name, make in CASES.items():
        p0, p1 = make_params()
        opt = make([{"params": [p0], "weight_decay": WEIGHT_DECAY[name]},
                    {"params": [p1], "weight_decay": 0.0}])
        base = opt.param_groups[0]["lr"]
        for t in range(5):
            for group in opt.param_groups:
                group["lr"] = base * (1.0 - 0.1 * t)
            for p in (p0, p1):
                p.grad = gradient(p, t)
            opt.step()
        values = [v for p in (p0, p1) for v in p.detach().flatten().tolist()]
        print(name, " ".join(repr(v) for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
