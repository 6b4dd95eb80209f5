"""stoker.Loader: its batches (any thread count, any world size), the resume contract, the life cycle."""
import gc
import hashlib
import os

import pytest
import torch

import stoker
from conftest import fmnist_loader_keywords


def digests(loader, limit=None):
    """sha256 of each batch's pixels and labels, in order."""
    out = []
    for images, labels in loader:
        out.append(hashlib.sha256(images.contiguous().numpy().tobytes() + labels.numpy().tobytes()).hexdigest())
        if limit is not None and len(out) == limit:
            break
    return out


def threads():
    """This process's threads, once the loaders nothing refers to are gone."""
    gc.collect()
    return len(os.listdir("/proc/self/task"))


def test_batches_do_not_depend_on_the_thread_count(fmnist):
    runs = [digests(stoker.Loader(fmnist, **fmnist_loader_keywords(num_threads=n))) for n in (0, 1, 3)]
    assert len(runs[0]) == 512 // 64
    assert runs[0] == runs[1] == runs[2]
    other_seed = digests(stoker.Loader(fmnist, **fmnist_loader_keywords(seed=4)))
    assert other_seed != runs[0]  # the draws depend on the seed: the comparison above can fail


def test_two_ranks_together_are_one_process(fmnist):
    one = list(stoker.Loader(fmnist, **fmnist_loader_keywords(rank=0, world_size=1)))
    ranks = [list(stoker.Loader(fmnist, **fmnist_loader_keywords(batch_size=32, rank=r, world_size=2)))
             for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(one)
    for k, (images, labels) in enumerate(one):
        assert torch.equal(images, torch.cat([ranks[0][k][0], ranks[1][k][0]]))
        assert torch.equal(labels, torch.cat([ranks[0][k][1], ranks[1][k][1]]))


def test_state_resumes_mid_epoch_at_another_world_size(fmnist):
    straight = digests(stoker.Loader(fmnist, **fmnist_loader_keywords()))
    states = []
    for r in (0, 1):
        loader = stoker.Loader(fmnist, **fmnist_loader_keywords(batch_size=32, rank=r, world_size=2, num_threads=2))
        assert len(digests(loader, limit=3)) == 3
        states.append(loader.state_dict())
        loader.close()
    assert states[0] == states[1]  # one state, the same on every rank
    assert states[0]["epoch"] == 0 and states[0]["batch"] == 3
    resumed = stoker.Loader(fmnist, **fmnist_loader_keywords(num_threads=1))
    resumed.load_state_dict(states[0])
    assert digests(resumed) == straight[3:]
    # The epoch done, the state is the next epoch's start, and the next iter() runs it.
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["batch"] == 0
    resumed.set_epoch(1)
    next_epoch = digests(resumed)
    assert len(next_epoch) == len(straight) and next_epoch != straight


def test_a_state_of_other_data_is_refused_saying_what_differs(fmnist):
    state = stoker.Loader(fmnist, **fmnist_loader_keywords()).state_dict()
    with pytest.raises(ValueError, match=r"run\.seed: 3 -> 4"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(seed=4)).load_state_dict(state)
    flipless = fmnist_loader_keywords(transforms=[{"type": "random_crop", "size": 24, "padding": 2}])
    with pytest.raises(ValueError, match=r"data\.train_transforms"):
        stoker.Loader(fmnist, **flipless).load_state_dict(state)
    with pytest.raises(ValueError, match="samples per optimizer step"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(batch_size=32)).load_state_dict(state)
    # More threads are how, not what: the state loads.
    stoker.Loader(fmnist, **fmnist_loader_keywords(num_threads=2)).load_state_dict(state)


@pytest.mark.parametrize("corrupt, message", [
    (lambda s: "not a dict", "must be a dict"),
    (lambda s: {k: v for k, v in s.items() if k != "epoch"}, "has no 'epoch'"),
    (lambda s: {**s, "batch": "three"}, "'batch' is str, expected an integer"),
    (lambda s: {**s, "format": "other/1"}, "format is 'other/1'"),
    (lambda s: {**s, "data": "data: {batch_sise: 3}"}, "batch_sise"),
    (lambda s: {**s, "data": "[unclosed"}, "not one a loader saved"),
    (lambda s: {**s, "batch": 10**6}, "but an epoch here has 8 batches"),
])
def test_a_corrupt_state_is_a_value_error(fmnist, corrupt, message):
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords())
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(corrupt(loader.state_dict()))
    assert len(digests(loader)) == 8  # and the loader still works


def test_break_leaks_no_thread_and_the_next_iter_continues(fmnist):
    straight = digests(stoker.Loader(fmnist, **fmnist_loader_keywords()))  # and torch's own threads started
    before = threads()
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords(num_threads=3))
    with_workers = threads()
    assert with_workers == before + 3
    assert digests(loader, limit=2) == straight[:2]  # break after two batches
    assert threads() == with_workers
    assert digests(loader) == straight[2:]  # the next iter() goes on from there
    loader.set_epoch(0)
    assert digests(loader, limit=1) == straight[:1]
    first = iter(loader)
    next(first)
    second = iter(loader)  # a newer iter() ends the older one
    next(second)
    with pytest.raises(RuntimeError, match="ended by a newer iter"):
        next(first)
    loader.close()
    assert threads() == before
    for use in (lambda: iter(loader), lambda: len(loader), loader.state_dict, loader.stats):
        with pytest.raises(RuntimeError, match="closed"):
            use()
    loader.close()  # again: nothing


def test_with_closes_and_batches_stay_the_callers(fmnist):
    list(stoker.Loader(fmnist, **fmnist_loader_keywords()))  # torch's own threads started
    before = threads()
    with stoker.Loader(fmnist, **fmnist_loader_keywords(num_threads=2)) as loader:
        kept = [images for images, _ in loader]
        copy = [k.clone() for k in kept]
        list(loader)  # another epoch: the loader's buffers are reused, the batches handed out are not
    assert threads() == before
    assert all(torch.equal(a, b) for a, b in zip(kept, copy))
    assert len({k.data_ptr() for k in kept}) == len(kept)


def test_shapes_len_classes_and_stats(fmnist):
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords())
    assert len(loader) == 8 and loader.batch_size == 64 and loader.num_samples == 512
    assert loader.class_names[:2] == ["T-shirt/top", "Trouser"]
    images, labels = next(iter(loader))
    assert images.shape == (64, 1, 24, 24) and images.dtype == torch.float32
    assert labels.shape == (64,) and labels.dtype == torch.int64
    stats = loader.stats()
    assert stats["batches"] == 1 and stats["samples"] == 64
    assert set(stats) >= {"read_s", "decode_s", "transform_s", "wait_s", "copy_s", "batch_ops_s"}
    raw = stoker.Loader(fmnist, **fmnist_loader_keywords(mean=None, std=None, channels_last=True))
    images, _ = next(iter(raw))
    assert images.shape == (64, 24, 24, 1) and images.dtype == torch.uint8
    evaluation = stoker.Loader(fmnist, **fmnist_loader_keywords(split="eval", transforms=[]))
    assert len(evaluation) == 4  # 200 samples in batches of 64, the last partial: evaluation keeps it
    assert sum(len(labels) for _, labels in evaluation) == 200


def test_batch_operations_give_soft_targets(fmnist):
    ops = [{"type": "mixup", "mixup_alpha": 0.8, "cutmix_alpha": 1.0}]
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords(batch_ops=ops, num_classes=10))
    images, targets = next(iter(loader))
    assert targets.shape == (64, 10) and targets.dtype == torch.float32
    assert torch.allclose(targets.sum(1), torch.ones(64), atol=1e-5)


def test_ranks_from_the_launchers_environment(fmnist, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords(batch_size=32))
    assert (loader.rank, loader.world_size, len(loader)) == (1, 2, 8)


# The GPU pass runs this with STOKER_REQUIRE_CUDA=1: without a device it then fails instead of skipping.
@pytest.mark.skipif(not torch.cuda.is_available() and os.environ.get("STOKER_REQUIRE_CUDA") != "1",
                    reason="no CUDA device here (the GPU pass runs it: scripts/gpu_pass.sh, stage python_loader)")
def test_cuda_batches_are_on_the_device_on_the_callers_stream_and_never_reused(fmnist):
    on_cpu = [(images, labels) for images, labels in stoker.Loader(fmnist, **fmnist_loader_keywords())]
    loader = stoker.Loader(fmnist, **fmnist_loader_keywords(device="cuda", num_threads=2))
    side = torch.cuda.Stream()
    held, sums = [], []
    with torch.cuda.stream(side):  # the caller's current stream is not the default one
        for images, labels in loader:
            assert images.is_cuda and labels.is_cuda
            sums.append(images.double().sum())  # queued on `side` at once, no synchronisation first
            held.append((images, labels))  # every batch held: its memory must not be handed out again
    torch.cuda.synchronize()
    assert len(held) == len(on_cpu)
    for k, ((images, labels), (want_images, want_labels)) in enumerate(zip(held, on_cpu)):
        torch.testing.assert_close(images.cpu(), want_images, rtol=0, atol=1e-6, msg=f"batch {k}")
        assert torch.equal(labels.cpu(), want_labels), f"batch {k}"
        torch.testing.assert_close(sums[k].cpu(), want_images.double().sum(), rtol=1e-9, atol=1e-6)
