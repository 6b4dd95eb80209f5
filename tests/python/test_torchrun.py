"""Under torchrun, with a Gloo process group: each rank's stoker.Loader takes its rank and world size
from torch.distributed, and the ranks' batches together are one process's; the example training loop
runs on two processes and resumes."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import stoker
from conftest import SOURCE_DIR, fmnist_loader_keywords

RANK_SCRIPT = r"""
import json, sys
import torch, torch.distributed as dist
import stoker
sys.path.insert(0, sys.argv[2])
from conftest import fmnist_loader_keywords
dist.init_process_group("gloo")
loader = stoker.Loader("/usr/share/datasets/fashion-mnist", **fmnist_loader_keywords(batch_size=32, num_threads=2))
batches = [(images.tolist(), labels.tolist()) for images, labels in loader]
out = {"rank": loader.rank, "world_size": loader.world_size, "len": len(loader), "batches": batches}
with open(f"{sys.argv[1]}/rank{dist.get_rank()}.json", "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def torchrun(tmp_path, *args, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               *map(str, args)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_two_torchrun_ranks_together_are_one_process(fmnist, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    torchrun(tmp_path, script, tmp_path, pathlib.Path(__file__).parent)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    one = list(stoker.Loader(fmnist, **fmnist_loader_keywords(rank=0, world_size=1)))
    assert ranks[0]["len"] == ranks[1]["len"] == len(one)
    for k, (images, labels) in enumerate(one):
        halves = [torch.tensor(ranks[r]["batches"][k][0], dtype=images.dtype) for r in (0, 1)]
        assert torch.equal(images, torch.cat(halves)), f"batch {k}"
        assert labels.tolist() == ranks[0]["batches"][k][1] + ranks[1]["batches"][k][1], f"batch {k}"


def test_the_example_trains_on_two_processes_and_resumes_on_one(fmnist, tmp_path):
    example = SOURCE_DIR / "examples" / "python" / "train_fashion_mnist.py"
    checkpoint = tmp_path / "checkpoint.pt"
    common = ["--batch-size", "32", "--threads", "1", "--checkpoint", checkpoint, "--save-every", "10"]
    out = torchrun(tmp_path, example, "--steps", "20", *common)
    assert checkpoint.exists(), out
    saved = torch.load(checkpoint, weights_only=False)
    assert saved["loader"]["world_size"] == 2 and saved["loader"]["batch_size"] == 32
    # One process with the batch doubled (the same global batch) goes on from step 20.
    common[1] = "64"
    done = subprocess.run([sys.executable, str(example), "--steps", "30", *map(str, common)], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed" in done.stdout and "at step 20" in done.stdout, done.stdout[-3000:]
