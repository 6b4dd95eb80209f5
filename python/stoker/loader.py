"""stoker.Loader: Stoker's C++ loader (recipe/split_loader.h) as an iterable like torch's DataLoader.

Built from a recipe (Loader.from_recipe) or from keywords, which are written into the same recipe
structure the trainer reads (the data: section, run.seed, train.channels_last) and parsed by the same
C++ code: one path, the same checks and messages, the same batches as `trainer train`.
"""

import json
import os

from . import _C

_SPLITS = {"train": "train", "eval": "test", "test": "test"}


def _ranks(rank, world_size):
    """This process's rank and world size: the keywords, else torch.distributed's when it is initialised,
    else the launcher's environment (RANK, WORLD_SIZE), else one process."""
    if rank is not None or world_size is not None:
        return (0 if rank is None else int(rank)), (1 if world_size is None else int(world_size))
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "WORLD_SIZE" in os.environ:
        return int(os.environ.get("RANK", "0")), int(os.environ["WORLD_SIZE"])
    return 0, 1


def _split(split):
    if split not in _SPLITS:
        raise ValueError(f"split {split!r}: expected 'train' or 'eval'")
    return _SPLITS[split]


class Loader:
    """Batches of one split, iterated an epoch at a time: ``for images, labels in loader``.

    Keywords (each one a recipe key; docs/python.md lists them): ``root`` and ``type`` (data.root,
    data.type: image_folder, webdataset, idx, cifar10, cifar100, synthetic) with ``dataset`` (that
    type's own keys), ``split`` ("train" or "eval"), ``batch_size`` (per rank), ``shuffle``, ``seed``,
    ``drop_last``, ``num_threads`` (data.workers; 0 builds batches in the calling thread),
    ``transforms`` (a list of dicts in the recipe's schema), ``mean``/``std`` (normalised float
    batches [B, C, H, W]; without them uint8 batches [B, H, W, C] as built), ``channels_last``,
    ``device``, ``on_bad_sample`` ("skip" or "error"), ``batch_ops`` (mixup/CutMix, random erasing:
    training only), ``num_classes``, ``data`` (any further data: keys), ``rank``/``world_size``
    (default: torch.distributed's, else RANK/WORLD_SIZE, else 0 of 1) and ``overrides``
    ("key.path=value", as ``--set``).

    Every batch is the caller's own tensors: the loader copies out of its reused buffers before it
    hands a batch out, and never writes into one it handed out.
    """

    def __init__(self, root=None, *, type="image_folder", dataset=None, split="train", batch_size=64, shuffle=True,
                 seed=0, drop_last=True, num_threads=0, transforms=None, mean=None, std=None, channels_last=False,
                 device="cpu", on_bad_sample="skip", batch_ops=None, num_classes=0, data=None, rank=None,
                 world_size=None, overrides=()):
        if root is None:
            raise ValueError("Loader needs root: the data set's folder (or shard pattern); "
                             "Loader.from_recipe(path) reads a recipe instead")
        if (mean is None) != (std is None):
            raise ValueError("give mean and std together (normalised float batches), or neither (uint8 batches)")
        split = _split(split)
        section = {"type": type, "root": os.fspath(root), "batch_size": batch_size, "eval_batch_size": batch_size,
                   "shuffle": shuffle, "drop_last": drop_last, "workers": num_threads,
                   "on_bad_sample": on_bad_sample, "num_classes": num_classes,
                   "train_transforms" if split == "train" else "eval_transforms": list(transforms or [])}
        if dataset:
            section[type] = dict(dataset)
        if mean is not None:
            section["mean"], section["std"] = list(mean), list(std)
        if batch_ops:
            section["batch_ops"] = list(batch_ops)
        section.update(data or {})
        recipe = {"run": {"seed": seed}, "data": section, "train": {"channels_last": channels_last}}
        text = json.dumps(recipe, indent=1)  # JSON is YAML: the recipe parser reads it, with lines in errors
        config = _C.parse_config(text, "stoker.Loader(...)", [str(o) for o in overrides])
        self._open(config, split, rank, world_size, device, output_uint8=mean is None)

    @classmethod
    def from_recipe(cls, path, split="train", overrides=(), *, device="cpu", uint8=False, rank=None, world_size=None):
        """The loader of a recipe's split, as `trainer train` builds it (data.*, run.seed,
        train.channels_last, the precision's input dtype); ``overrides`` are ``--set`` values
        ("data.workers=4"). ``uint8=True`` hands out the uint8 batches as built, not normalised."""
        config = _C.load_config(os.fspath(path), [str(o) for o in overrides])
        self = cls.__new__(cls)
        self._open(config, _split(split), rank, world_size, device, output_uint8=uint8)
        return self

    def _open(self, config, split, rank, world_size, device, output_uint8):
        self._c = None  # so that close() and __del__ work when the constructor below fails
        self._generation = 0
        self.batch_digest = 0
        rank, world_size = _ranks(rank, world_size)
        self._c = _C.SplitLoader(config, split, rank, world_size, str(device), bool(output_uint8))

    def _loader(self):
        if self._c is None or self._c.closed:
            raise RuntimeError("this Loader was closed; build a new one to load again")
        return self._c

    # ---- iterating -------------------------------------------------------------------------------------

    def __iter__(self):
        """One epoch from where the loader stands: the next batch not yet handed out (after
        load_state_dict, mid-epoch), or, after a finished epoch, the next epoch's first batch. A newer
        iter() of the same loader ends this one."""
        c = self._loader()
        self._generation += 1
        generation = self._generation
        c.begin()
        return self._batches(c, generation)

    def _batches(self, c, generation):
        while True:
            if generation != self._generation:
                raise RuntimeError("this iterator was ended by a newer iter() of the same Loader")
            item = self._loader().next()  # waits without the GIL
            if item is None:
                return
            images, labels, self.batch_digest = item
            yield images, labels

    def __len__(self):
        """Batches per epoch on this rank (arithmetic: nothing is loaded)."""
        return self._loader().num_batches

    def set_epoch(self, epoch):
        """The next iter() starts ``epoch`` (0-based) at its first batch."""
        self._loader().set_epoch(int(epoch))

    # ---- what it is -----------------------------------------------------------------------------------

    @property
    def class_names(self):
        return list(self._loader().class_names)

    @property
    def batch_size(self):
        return self._loader().batch_size

    @property
    def num_samples(self):
        """Samples per epoch on this rank (counting a dropped partial batch)."""
        return self._loader().num_samples

    @property
    def rank(self):
        return self._loader().rank

    @property
    def world_size(self):
        return self._loader().world_size

    # ---- state ----------------------------------------------------------------------------------------

    def state_dict(self):
        """Where the loader stands: a small dict, the same on every rank, that load_state_dict() resumes
        exactly, also at another world size with the same global batch (docs/python.md)."""
        return self._loader().state()

    def load_state_dict(self, state):
        """Continues where ``state`` stands; the next iter() starts there. A state of another data
        configuration or global batch is a ValueError saying what differs."""
        self._loader().load_state(state)

    def stats(self):
        """Seconds spent since the last call: read_s, decode_s, transform_s (summed over the threads),
        wait_s (the caller waiting for a batch), copy_s, batch_ops_s; and samples, batches,
        bad_samples, read_bytes, read_opens. The trainer logs the same stages (data/read_s, ...)."""
        return self._loader().take_times()

    # ---- life cycle -----------------------------------------------------------------------------------

    def close(self):
        """Stops the threads and frees the buffers; batches handed out stay valid. Idempotent."""
        if self._c is not None and not self._c.closed:
            self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
