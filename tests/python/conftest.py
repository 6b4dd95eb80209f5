"""Shared fixtures of the stoker package's tests: Fashion-MNIST's IDX files (Debian's
dataset-fashion-mnist, installed by scripts/setup.sh) and small recipes on them."""
import os
import pathlib

import pytest

FASHION_MNIST = pathlib.Path("/usr/share/datasets/fashion-mnist")
SOURCE_DIR = pathlib.Path(os.environ.get("STOKER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture(scope="session")
def fmnist():
    if not (FASHION_MNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.fail(f"{FASHION_MNIST} has no Fashion-MNIST; scripts/setup.sh installs dataset-fashion-mnist")
    return FASHION_MNIST


def fmnist_loader_keywords(**changes):
    """A Fashion-MNIST training loader's keywords: 512 samples, random crops and flips (draws that
    depend on the seed), normalised."""
    keywords = dict(type="idx", dataset={"class_names": "fashion_mnist"}, data={"train_limit": 512, "test_limit": 200},
                    batch_size=64, seed=3, num_threads=0, mean=[0.286], std=[0.353],
                    transforms=[{"type": "random_crop", "size": 24, "padding": 2}, {"type": "horizontal_flip"}])
    keywords.update(changes)
    return keywords


@pytest.fixture
def tiny_recipe(tmp_path, fmnist):
    """A recipe that trains a tiny network on 256 Fashion-MNIST samples for one epoch, on the CPU."""
    text = (SOURCE_DIR / "configs" / "fashion_mnist.yaml").read_text()
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    overrides = [f"run.dir={tmp_path / 'runs'}", "run.device=cpu", "run.threads=1", "data.train_limit=256",
                 "data.test_limit=256", "data.batch_size=64", "data.eval_batch_size=128", "train.epochs=1",
                 "train.precision=fp32", "model.widths=[8,16]", "model.blocks=[1,1]", "train.log_every_steps=1",
                 "logging.sample_digests=true", "logging.telemetry=false", "logging.flops=false",
                 "data.train_transforms=[{type: random_crop, size: 28, padding: 2}, {type: horizontal_flip}]"]
    return path, overrides
