"""The trainer's subcommands that have a result, one call each: train, evaluate, export.

Each runs the same C++ code as the `trainer` program (recipe/run.h, recipe/tasks.h, recipe/export.h),
with the GIL released, so that other Python threads go on meanwhile.
"""

import os
import signal
import threading

from . import _C


def _config(recipe, overrides):
    return _C.load_config(os.fspath(recipe), [str(o) for o in overrides])


def train(recipe=None, overrides=(), *, resume=None, allow_config_change=False):
    """Trains a recipe as `trainer train --config RECIPE --set ...` does (or continues ``resume``, a run
    directory or checkpoint, with its saved config when ``recipe`` is None) and returns a dict:
    run_dir, epochs, steps, final_test (loss, top1, top5, samples, excluded), best_metric/best_epoch
    when evaluated, seconds, interrupted, stopped_early, and checkpoints (last, best: the files that
    exist).

    Ctrl-C (SIGINT) or SIGTERM stops the run after its current step and saves it, as the trainer does:
    the result then has interrupted=True and ``resume`` says how to continue (a second Ctrl-C ends the
    process at once, as it ends the trainer). Python's own handlers are back when it returns. From a
    thread other than the main one, signals are left to Python."""
    if recipe is None and resume is None:
        raise ValueError("train needs a recipe, or resume= a run directory or checkpoint to continue")
    if recipe is None:  # the config the run saved in its checkpoint
        config = _C.checkpoint_config(os.fspath(resume), [str(o) for o in overrides])
    else:
        config = _config(recipe, overrides)
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        result = _C.train(config, "" if resume is None else os.fspath(resume), bool(allow_config_change), main)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    run_dir = result["run_dir"]
    checkpoints = {}
    for name in ("last", "best"):
        path = os.path.join(run_dir, "checkpoints", f"{name}.pt") if run_dir else ""
        if path and os.path.isfile(path):
            checkpoints[name] = path
    result["checkpoints"] = checkpoints
    if result["interrupted"] and run_dir:
        result["resume"] = f"stoker.train(resume={run_dir!r})"
    return result


def evaluate(checkpoint, recipe=None, overrides=()):
    """Evaluates a checkpoint (a file, a run directory, or RUN:best / RUN:last) on its recipe's test
    split, as `trainer eval` does: loss, top1, top5, samples, excluded, epoch, step (and ``ema`` when
    the run kept an EMA of the weights). ``recipe`` replaces the config saved in the checkpoint."""
    return _C.evaluate(os.fspath(checkpoint), "" if recipe is None else os.fspath(recipe), [str(o) for o in overrides])


def export(checkpoint, output, format="", *, recipe=None, overrides=(), use_ema=False):
    """Writes a checkpoint's model as `trainer export` does (format onnx, torchscript or state_dict;
    empty: from the output's extension); returns format, model, metadata (the files) and summary."""
    return _C.export(os.fspath(checkpoint), os.fspath(output), format,
                     "" if recipe is None else os.fspath(recipe), [str(o) for o in overrides], bool(use_ema))
