"""Errors reach Python as exceptions of the fitting type with the library's message; none crashes."""
import pytest

import stoker
from conftest import fmnist_loader_keywords


def test_a_missing_data_root_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        stoker.Loader(tmp_path / "nowhere", batch_size=4)
    with pytest.raises(FileNotFoundError, match="train-images"):
        stoker.Loader(tmp_path, type="idx", batch_size=4)


def test_a_missing_recipe_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        stoker.Loader.from_recipe(tmp_path / "missing.yaml")
    with pytest.raises(FileNotFoundError):
        stoker.train(tmp_path / "missing.yaml")


def test_a_bad_key_or_value_is_a_value_error(fmnist, tmp_path):
    with pytest.raises(ValueError, match="batch_sise"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(data={"batch_sise": 3}))
    with pytest.raises(ValueError, match="batch_size"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(batch_size=0))
    with pytest.raises(ValueError, match="on_bad_sample"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(on_bad_sample="ignore"))
    with pytest.raises(ValueError, match="split"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(split="validation"))
    with pytest.raises(ValueError, match="rank 2 of world size 2"):
        stoker.Loader(fmnist, **fmnist_loader_keywords(rank=2, world_size=2))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  type: idx\n  root: /usr/share/datasets/fashion-mnist\n  workerz: 2\n")
    with pytest.raises(ValueError, match=r"r\.yaml: data\.workerz at line 4"):
        stoker.Loader.from_recipe(recipe)
    with pytest.raises(ValueError, match="--set data.batch_size"):
        stoker.Loader.from_recipe(recipe, overrides=["data.batch_size=-1"])


def image_folder(root, corrupt):
    """root/train/{cat,dog}/: 4 PNGs of slightly different sizes each, and dog/broken.png."""
    from PIL import Image
    for c, name in enumerate(["cat", "dog"]):
        (root / "train" / name).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (20 + i, 18), (40 * c + i, 10, 200)).save(root / "train" / name / f"{i}.png")
    (root / "train" / "dog" / "broken.png").write_bytes(corrupt)


def test_a_corrupt_image_is_skipped_or_a_runtime_error_naming_it(tmp_path):
    pytest.importorskip("PIL", reason="Pillow writes the images (bench/setup.sh installs it)")
    image_folder(tmp_path / "images", b"\x89PNG\r\n\x1a\n not really")
    keywords = dict(batch_size=9, shuffle=False, drop_last=False, transforms=[{"type": "center_crop", "size": 16}])
    strict = stoker.Loader(tmp_path / "images", on_bad_sample="error", **keywords)
    assert strict.class_names == ["cat", "dog"]
    with pytest.raises(RuntimeError, match="broken.png"):
        list(strict)
    lenient = stoker.Loader(tmp_path / "images", **keywords)
    (images, labels), = list(lenient)
    assert images.shape == (9, 16, 16, 3) and lenient.stats()["bad_samples"] == 1


def test_no_transform_to_one_size_is_a_clear_error(tmp_path):
    pytest.importorskip("PIL", reason="Pillow writes the images (bench/setup.sh installs it)")
    image_folder(tmp_path / "images", b"")
    with pytest.raises(RuntimeError, match="fixed-size crop"):
        stoker.Loader(tmp_path / "images", batch_size=2)
