"""stoker.train / evaluate / export: the C++ trainer from Python, and the loader's batches as the trainer's."""
import os
import re
import signal
import threading
import time

import pytest

import stoker


def test_train_returns_the_result_and_the_loader_has_its_batches(tiny_recipe):
    recipe, overrides = tiny_recipe
    result = stoker.train(recipe, overrides)
    assert result["epochs"] == 1 and result["steps"] == 256 // 64 and not result["interrupted"]
    assert result["final_test"]["samples"] == 256
    assert 0.0 <= result["final_test"]["top1"] <= 1.0
    assert os.path.isdir(result["run_dir"])
    assert os.path.isfile(result["checkpoints"]["last"])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's handler is back

    # The trainer logged, per optimizer step, the digest of its samples and their draws: the loader
    # built from the same recipe hands out the same batches (for any thread count).
    log = open(os.path.join(result["run_dir"], "train.log")).read()
    logged = [int(d, 16) for d in re.findall(r"samples of step \d+ \(epoch 1, batch \d+\): digest ([0-9a-f]{16})", log)]
    assert len(logged) == 4
    for threads in (0, 2):
        loader = stoker.Loader.from_recipe(recipe, overrides=overrides + [f"data.workers={threads}"])
        mine = []
        for _ in loader:
            mine.append(loader.batch_digest)
        assert mine == logged

    evaluated = stoker.evaluate(result["checkpoints"]["last"])
    assert evaluated["samples"] == 256
    assert evaluated["top1"] == pytest.approx(result["final_test"]["top1"], abs=1.5 / 256)

    exported = stoker.export(result["checkpoints"]["last"], os.path.join(result["run_dir"], "model.pt"),
                             "state_dict")
    assert os.path.isfile(exported["model"]) and exported["format"] == "state_dict"


def test_train_errors_are_python_exceptions(tiny_recipe):
    recipe, overrides = tiny_recipe
    with pytest.raises(ValueError, match="trian"):
        stoker.train(recipe, overrides + ["trian.epochs=2"])
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        stoker.train(resume=os.path.join(os.path.dirname(recipe), "no-run"))


def test_ctrl_c_stops_at_a_step_boundary_and_the_run_resumes(tiny_recipe):
    recipe, overrides = tiny_recipe
    overrides = overrides + ["train.epochs=400", "logging.sample_digests=false"]
    runs = os.path.join(os.path.dirname(recipe), "runs")

    def interrupt_once_training():  # the metrics file appears when the run's first steps are logged
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for folder, _, files in os.walk(runs):
                if "metrics.jsonl" in files and os.path.getsize(os.path.join(folder, "metrics.jsonl")) > 0:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=interrupt_once_training)
    killer.start()
    result = stoker.train(recipe, overrides)
    killer.join()
    assert result["interrupted"] and 0 < result["steps"] < 400 * 4
    assert result["resume"] == f"stoker.train(resume={result['run_dir']!r})"
    assert os.path.isfile(result["checkpoints"]["last"])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # Continued with fewer epochs in all, it ends at once where the run stands or a few steps on.
    resumed = stoker.train(resume=result["run_dir"], overrides=[f"train.epochs={result['epochs'] + 1}"],
                           allow_config_change=True)
    assert not resumed["interrupted"] and resumed["steps"] == (result["epochs"] + 1) * 4
