#!/usr/bin/env python3
"""scripts/strategy_equality.py: every recipe in configs/ trains the same before and after a change to the
data-parallel strategies (issue 36): the first steps' digests of two `trainer` builds, on one process and on
two Gloo ranks (plain DDP and ZeRO-1), compared.

For each recipe that can run on this machine (small stand-ins for its data are written here: a CIFAR-10
binary set, an ImageFolder of PNGs; Fashion-MNIST is read where configs/ points; pretrained weights are left
out), each build trains a few optimizer steps on the CPU in fp32 (train.precision: auto times candidates and
could pick another on another run), with small images and batches set by --set and everything else as
shipped, then writes checkpoints/last.pt. Two digests per run:
  losses   the per-step losses of metrics.jsonl (on two ranks a build before issue 36 logs rank 0's own
           loss, after it the global batch's: compared on one process only)
  weights  SHA-256 over the checkpoint's model tensors (exported as a state dict by the AFTER build,
           read with the venv's torch), in name order
Recipes with dropout or drop path draw other masks on rank 1 after issue 36 (each rank its own stream),
so their two-rank weights differ by design; the table says which.

  python3 scripts/strategy_equality.py BEFORE_TRAINER AFTER_TRAINER [--recipes a.yaml,b.yaml] [--work DIR]
"""
import argparse
import glob
import hashlib
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV_PY = pathlib.Path(os.environ.get("STOKER_CACHE", pathlib.Path.home() / ".cache/stoker")) / "venv-torch-2.11.0/bin/python"
STEPS = 3


def png(path, h, w, seed):
    """An RGB PNG of h x w pixels, deterministic in `seed` (no imaging library needed)."""
    rows = b"".join(b"\x00" + bytes((40 + (x * 7 + y * 3 + seed * 11 + c * 50) % 170) for x in range(w) for c in range(3))
                    for y in range(h))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                     chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_data(work):
    folder = work / "images"
    if not folder.exists():
        for split, n in (("train", 16), ("val", 4)):
            for c in range(2):
                d = folder / split / f"class{c}"
                d.mkdir(parents=True)
                for i in range(n):
                    png(d / f"{i}.png", 36 + i % 5, 40 + i % 7, 100 * c + i)
    cifar = work / "cifar10"
    if not cifar.exists():
        cifar.mkdir()
        for name, n in [(f"data_batch_{i}.bin", 64) for i in range(1, 6)] + [("test_batch.bin", 32)]:
            records = bytearray()
            for k in range(n):
                records += bytes([k % 10]) + bytes((k * 31 + p * 7) % 256 for p in range(3072))
            (cifar / name).write_bytes(bytes(records))
    return folder, cifar


def recipe_sets(name, folder, cifar):
    """The --set values that make `name` run here in a few steps, or a reason it cannot."""
    fmnist = pathlib.Path("/usr/share/datasets/fashion-mnist")
    small_images = ["data.train_transforms[0].size=32", "data.eval_transforms[0].size=36",
                    "data.eval_transforms[1].size=32", "data.batch_size=8", "data.eval_batch_size=8"]
    if name.startswith("fashion_mnist"):
        if not fmnist.exists():
            return None, f"no Fashion-MNIST at {fmnist}"
        return ["data.batch_size=32", f"data.train_limit={32 * STEPS}", "data.test_limit=64",
                "data.eval_batch_size=64"], None
    if name == "starved_toy":
        return ["data.synthetic.cpu_cost_us=0", f"data.synthetic.train_samples={32 * STEPS}",
                "data.synthetic.test_samples=32", "data.batch_size=32", "data.eval_batch_size=32"], None
    if name == "cifar10_resnet18":
        return [f"data.root={cifar}", "data.batch_size=16", "data.train_limit=160", "data.test_limit=32",
                "data.eval_batch_size=32"], None
    sets = [f"data.root={folder}", "data.num_classes=2"] + small_images
    if name.startswith("imagenet_resnet50_"):
        sets += ["data.eval_size=32"]
    if name.startswith("finetune_"):
        # Its model.freeze_until_epoch (1) needs a second epoch; ZeRO-1 refuses model.freeze (both builds).
        sets += ["model.pretrained=''", "train.epochs=2", "schedule.warmup_epochs=0.5"]
    return sets, None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(binary, recipe, sets, mode, out):
    """Trains `recipe` with `binary` as `mode` (one | ddp | zero1) into `out`, or raises."""
    args = [str(binary), "train", "--config", str(recipe), "--set", f"run.dir={out}", "--set", "run.name=eq",
            "--set", "run.device=cpu", "--set", "run.threads=1", "--set", "train.epochs=1",
            "--set", "train.precision=fp32", "--set", "data.workers=0", "--set", "train.log_every_steps=1",
            "--set", "train.cuda_graph=false"]
    if "one_cycle" not in recipe.read_text():  # a warm-up shorter than the one epoch (one_cycle has its own)
        args += ["--set", "schedule.warmup_epochs=0.5"]
    for s in sets:
        args += ["--set", s]
    if mode == "zero1":
        args += ["--set", "distributed.shard_optimizer=true"]  # what both builds read
    ranks = 1 if mode == "one" else 2
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))}
        if ranks > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port)
        log = open(f"{out}.rank{rank}.log", "w")
        procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=1800) for p in procs]
    if any(codes):
        raise RuntimeError(f"exit codes {codes}; see {out}.rank0.log: " +
                           pathlib.Path(f"{out}.rank0.log").read_text()[-600:])


def digests(after_binary, run):
    losses = [json.loads(l)["loss"] for l in open(run / "metrics.jsonl") if json.loads(l).get("kind") == "step"]
    pth = run / "weights.pth"
    subprocess.run([str(after_binary), "export", "--checkpoint", str(run / "checkpoints/last.pt"), "--output", str(pth),
                    "--format", "state_dict"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    code = ("import hashlib,sys,torch\n"
            "sd=torch.load(sys.argv[1],map_location='cpu')\n"
            "h=hashlib.sha256()\n"
            "for k in sorted(sd):\n"
            "  h.update(k.encode()); h.update(sd[k].contiguous().numpy().tobytes())\n"
            "print(h.hexdigest()[:16])\n")
    weights = subprocess.run([str(VENV_PY), "-c", code, str(pth)], check=True, capture_output=True,
                             text=True).stdout.strip()
    loss_digest = hashlib.sha256(json.dumps(losses).encode()).hexdigest()[:16]
    return losses, loss_digest, weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--recipes", default="")
    ap.add_argument("--modes", default="one,ddp,zero1")
    ap.add_argument("--work", default="")
    ap.add_argument("--train", default="before,after", help="the builds to train now; the others' runs are read "
                    "from --work (a run made earlier)")
    a = ap.parse_args()
    work = pathlib.Path(a.work or tempfile.mkdtemp(prefix="strategy-eq-"))
    work.mkdir(parents=True, exist_ok=True)
    folder, cifar = write_data(work)
    recipes = [ROOT / "configs" / r for r in a.recipes.split(",")] if a.recipes else sorted((ROOT / "configs").glob("*.yaml"))
    print(f"# {len(recipes)} recipe(s), {STEPS}-ish steps each, work dir {work}")
    print(f"{'recipe':28} {'mode':6} {'steps':>5} {'losses before/after':37} {'weights before/after':35} verdict")
    failures = 0
    if a.train == "before":  # training only: the digests need the after build's exporter
        for recipe in recipes:
            sets, why = recipe_sets(recipe.stem, folder, cifar)
            for mode in a.modes.split(",") if sets is not None else []:
                out = work / f"{recipe.stem}-{mode}-before"
                shutil.rmtree(out, ignore_errors=True)
                try:
                    train(a.before, recipe, sets, mode, out)
                    print(f"{recipe.stem} {mode}: trained", flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"{recipe.stem} {mode}: failed: {str(e)[:300]}", flush=True)
        return 0
    for recipe in recipes:
        sets, why = recipe_sets(recipe.stem, folder, cifar)
        if sets is None:
            print(f"{recipe.stem:28} {'-':6} {'-':>5} skipped: {why}")
            continue
        for mode in a.modes.split(","):
            try:
                d = {}
                for label, binary in (("before", a.before), ("after", a.after)):
                    out = work / f"{recipe.stem}-{mode}-{label}"
                    if label in a.train.split(","):
                        shutil.rmtree(out, ignore_errors=True)
                        train(binary, recipe, sets, mode, out)
                    runs = sorted(glob.glob(f"{out}/eq/*/"))
                    if not runs:
                        raise RuntimeError(f"no run of the {label} build in {out}")
                    d[label] = digests(a.after, pathlib.Path(runs[-1]))
            except Exception as e:  # noqa: BLE001 - reported in the table
                print(f"{recipe.stem:28} {mode:6} {'-':>5} failed: {str(e)[:300]}")
                failures += 1
                continue
            (bl, bld, bw), (al, ald, aw) = d["before"], d["after"]
            same_losses, same_weights = bld == ald, bw == aw
            ok = same_weights and (same_losses or mode != "one")
            verdict = "equal" if ok else "DIFFERENT"
            if mode != "one" and not same_losses:
                verdict += " (losses: rank 0's before, the global batch's after)"
            print(f"{recipe.stem:28} {mode:6} {len(al):>5} {bld} {ald} {'==' if same_losses else '!='} "
                  f"{bw} {aw} {'==' if same_weights else '!='} {verdict}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
