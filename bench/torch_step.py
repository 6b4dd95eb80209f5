#!/usr/bin/env python3
"""The PyTorch peer of `trainer bench-step` for torchvision's model families (issue 30): torchvision's
model in a plain eager training loop on one batch already in memory, so that, as in bench-step, only
the step is timed (forward, cross-entropy, backward, SGD with Nesterov momentum and weight decay off
norms and biases, as Stoker's optimizer does; under CPU/CUDA autocast in bf16 for bf16-mixed).

    python bench/torch_step.py --model efficientnet_b0 [--precision fp32|bf16-mixed] [--batch-size 32]
                               [--size 64] [--classes 100] [--steps 20] [--warmup 5] [--threads 2]
                               [--channels-last] [--device cpu|cuda]

bench/run_family_step_bench.sh runs it interleaved with the same step in Stoker
(bench/step_families.yaml). Prints one JSON line: model, precision, ms_per_step, samples_per_s.
"""
import argparse
import json
import time
import warnings

warnings.simplefilter("ignore")  # torch's notice about a missing NumPy

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402


def parameter_groups(model, weight_decay):
    """Weight decay on the weights of convolutions and linear layers only, as Stoker's optimizer."""
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() > 1 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    device = torch.device(args.device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).to(device, memory_format=memory_format)
    model.train()
    optimizer = torch.optim.SGD(parameter_groups(model, 1e-4), lr=0.1, momentum=0.9, nesterov=True)
    x = torch.randn(args.batch_size, 3, args.size, args.size, device=device).contiguous(memory_format=memory_format)
    y = torch.randint(0, args.classes, (args.batch_size,), device=device)
    mixed = args.precision == "bf16-mixed"

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    loss = loss.item()  # waits for the device
    seconds = time.perf_counter() - start
    print(json.dumps({"model": args.model, "precision": args.precision, "channels_last": args.channels_last,
                      "batch_size": args.batch_size, "ms_per_step": 1e3 * seconds / args.steps,
                      "samples_per_s": args.batch_size * args.steps / seconds, "loss": loss,
                      "threads": torch.get_num_threads(), "device": str(device)}))


if __name__ == "__main__":
    main()
