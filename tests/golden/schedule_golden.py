"""Golden learning-rate curves from PyTorch's own schedulers, for tests/optim/schedule_test.cpp.

For each case it prints a header line with the case's Stoker settings, then the learning rate of
every optimizer step as torch.optim.lr_scheduler gives it:

    case NAME type=cosine lr=0.1 steps_per_epoch=10 epochs=6 warmup_epochs=1.5 ...
    lr 0 0.006666666666666667
    ...

Stoker's linear warm-up over W steps (step s < W gets lr * (s + 1) / W) is LinearLR with
start_factor 1/W over W - 1 steps, chained with SequentialLR to CosineAnnealingLR (T_max = the
steps after warm-up - 1, eta_min = lr * final_lr_ratio), MultiStepLR (milestones in steps, counted
from the end of the warm-up) or a constant LambdaLR. one_cycle is OneCycleLR (cos, no momentum
cycling) on its own.

Run with the libtorch venv's Python: ~/.cache/stoker/venv-torch-2.11.0/bin/python schedule_golden.py
"""
import math
import warnings

warnings.simplefilter("ignore")  # torch's notice about a missing NumPy; SequentialLR's step(0) notice

import torch  # noqa: E402
from torch.optim import SGD  # noqa: E402
from torch.optim.lr_scheduler import (CosineAnnealingLR, LambdaLR, LinearLR, MultiStepLR,
                                      OneCycleLR, SequentialLR)  # noqa: E402

DEFAULTS = dict(warmup_epochs=0.0, final_lr_ratio=0.0, milestones=(), gamma=0.1, pct_start=0.3,
                div_factor=25.0, final_div_factor=1e4)

CASES = [
    ("constant_warmup", dict(type="constant", lr=0.1, steps_per_epoch=10, epochs=4, warmup_epochs=1.5)),
    ("cosine", dict(type="cosine", lr=0.4, steps_per_epoch=13, epochs=5)),
    ("warmup_cosine", dict(type="cosine", lr=0.1, steps_per_epoch=10, epochs=6, warmup_epochs=1.5,
                           final_lr_ratio=0.01)),
    ("warmup_cosine_short", dict(type="cosine", lr=3e-4, steps_per_epoch=3, epochs=3, warmup_epochs=1,
                                 final_lr_ratio=0.1)),
    ("step", dict(type="step", lr=1.0, steps_per_epoch=5, epochs=6, milestones=(1, 4), gamma=0.5)),
    ("warmup_step", dict(type="step", lr=0.2, steps_per_epoch=9, epochs=8, warmup_epochs=2,
                         milestones=(3, 5, 7), gamma=0.2)),
    ("one_cycle", dict(type="one_cycle", lr=0.5, steps_per_epoch=17, epochs=4)),
    ("one_cycle_fractional_peak", dict(type="one_cycle", lr=0.05, steps_per_epoch=7, epochs=3,
                                       pct_start=0.25, div_factor=10.0, final_div_factor=100.0)),
]


def warmup_steps(c):
    # As C++'s std::llround for the non-negative values here (Python's round() rounds half to even).
    return int(math.floor(c["warmup_epochs"] * c["steps_per_epoch"] + 0.5))


def make_scheduler(c, optimizer):
    total = c["steps_per_epoch"] * c["epochs"]
    if c["type"] == "one_cycle":
        return OneCycleLR(optimizer, max_lr=c["lr"], total_steps=total, pct_start=c["pct_start"],
                          anneal_strategy="cos", cycle_momentum=False, div_factor=c["div_factor"],
                          final_div_factor=c["final_div_factor"], three_phase=False)
    w = warmup_steps(c)
    if c["type"] == "constant":
        main = LambdaLR(optimizer, lambda step: 1.0)
    elif c["type"] == "cosine":
        main = CosineAnnealingLR(optimizer, T_max=max(1, total - w - 1), eta_min=c["lr"] * c["final_lr_ratio"])
    elif c["type"] == "step":
        main = MultiStepLR(optimizer, milestones=[m * c["steps_per_epoch"] - w for m in c["milestones"]],
                           gamma=c["gamma"])
    else:
        raise ValueError(c["type"])
    if w == 0:
        return main
    assert w >= 2, "LinearLR needs total_iters >= 1"
    warmup = LinearLR(optimizer, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)
    return SequentialLR(optimizer, [warmup, main], milestones=[w])


def curve(c):
    param = torch.zeros(1, requires_grad=True)
    optimizer = SGD([param], lr=c["lr"])
    scheduler = make_scheduler(c, optimizer)
    lrs = []
    for _ in range(c["steps_per_epoch"] * c["epochs"]):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def main():
    for name, settings in CASES:
        c = dict(DEFAULTS, **settings)
        fields = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else repr(v)}"
                          for k, v in c.items() if k != "type")
        print(f"case {name} type={c['type']} {fields}")
        for step, lr in enumerate(curve(c)):
            print(f"lr {step} {lr!r}")


if __name__ == "__main__":
    main()
