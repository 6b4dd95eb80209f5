"""A plain PyTorch training loop on stoker.Loader: Fashion-MNIST (Debian's dataset-fashion-mnist), a
small CNN, a checkpoint that holds the loader's state beside the model's and the optimizer's, and an
exact resume from it, mid-epoch included. On the CPU a few hundred steps take a minute or two.

    PYTHONPATH=build/release/python python examples/python/train_fashion_mnist.py --steps 300
    # stop it (Ctrl-C) and run the same command again: it continues from runs/example/checkpoint.pt
    torchrun --nproc-per-node 2 examples/python/train_fashion_mnist.py --steps 300   # DDP (Gloo)

Under torchrun each process builds its own loader after the process group starts; the loader takes
its rank and world size from torch.distributed and hands each rank its slice of every global batch.
The checkpoint's loader state is the same on every rank, so rank 0 saves it, and a run saved by two
processes resumes on one with --batch-size doubled (the same global batch), and the other way round.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import stoker


def model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def loader(split, batch_size, threads, **ranks):
    transforms = [{"type": "random_crop", "size": 28, "padding": 2}, {"type": "horizontal_flip"}] \
        if split == "train" else []
    return stoker.Loader("/usr/share/datasets/fashion-mnist", type="idx", dataset={"class_names": "fashion_mnist"},
                         split=split, batch_size=batch_size, seed=1, num_threads=threads, transforms=transforms,
                         mean=[0.286], std=[0.353], **ranks)


def evaluate(net, test):
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in test:
            correct += (net(images).argmax(1) == labels).sum().item()
            total += labels.numel()
    net.train()
    return correct / max(1, total)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps in all (resumed runs count the saved ones)")
    p.add_argument("--batch-size", type=int, default=128, help="per process")
    p.add_argument("--threads", type=int, default=2, help="the loader's threads per process")
    p.add_argument("--checkpoint", default="runs/example/checkpoint.pt")
    p.add_argument("--save-every", type=int, default=50)
    args = p.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    net = model()
    if distributed:
        net = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    train = loader("train", args.batch_size, args.threads)  # after init_process_group: it reads the ranks
    step = 0
    if os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, weights_only=True)
        (net.module if distributed else net).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        train.load_state_dict(saved["loader"])  # where the epoch stood, at any world size
        step = saved["step"]
        if rank == 0:
            print(f"resumed {args.checkpoint} at step {step} (epoch {saved['loader']['epoch']}, "
                  f"batch {saved['loader']['batch']})")

    def save():
        if rank != 0:
            return
        os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
        state = {"model": (net.module if distributed else net).state_dict(), "optimizer": optimizer.state_dict(),
                 "loader": train.state_dict(), "step": step}
        torch.save(state, args.checkpoint + ".tmp")
        os.replace(args.checkpoint + ".tmp", args.checkpoint)  # never a half-written checkpoint

    while step < args.steps:
        for images, labels in train:  # from the saved position; then epoch after epoch
            loss = F.cross_entropy(net(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and step % 50 == 0:
                print(f"step {step}: loss {loss.item():.4f} (epoch {train.state_dict()['epoch']})", flush=True)
            if step % args.save_every == 0:
                save()
            if step >= args.steps:
                break
    save()
    if rank == 0:
        # The whole test split, on rank 0 alone: with the plain module, since DDP's forward would
        # broadcast the batch-norm buffers to ranks that are no longer there.
        with loader("eval", 1000, args.threads, rank=0, world_size=1) as test:
            top1 = evaluate(net.module if distributed else net, test)
            print(f"test top-1 {100 * top1:.2f}% after {step} steps; loader stages: {train.stats()}")
    train.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
