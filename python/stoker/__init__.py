"""Stoker from Python: the C++ data loader as an iterable like torch's DataLoader, and the trainer one call away.

    import stoker
    loader = stoker.Loader("/data/imagenet", type="image_folder", batch_size=64, num_threads=4,
                           transforms=[{"type": "random_resized_crop", "size": 224}, {"type": "horizontal_flip"}],
                           mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    for images, labels in loader: ...
    result = stoker.train("configs/fashion_mnist.yaml", overrides=["train.epochs=1"])

The module `stoker._C` is built against one torch (its libtorch and libtorch_python); importing it
under another torch is refused here, before the extension is loaded. docs/python.md has the rest.
"""

import torch  # first: the extension links the libraries this torch has loaded

from . import _build_info

_running = torch.__version__
if _running != _build_info.TORCH_VERSION:
    raise ImportError(
        f"stoker was built against torch {_build_info.TORCH_VERSION}, but this Python runs torch {_running}; "
        f"its C++ module would not load (or would crash) with another libtorch. Reinstall stoker with this "
        f"torch: pip install --no-build-isolation --force-reinstall <stoker source folder>")

from . import _C  # noqa: E402  (after the version check, on purpose)
from .loader import Loader  # noqa: E402
from .tasks import evaluate, export, train  # noqa: E402

__all__ = ["Loader", "train", "evaluate", "export"]
