#!/usr/bin/env python3
"""scripts/torch_check.sh (the bundle's env.sh sources it on the GPU machine): the device's torch is
refused, in one sentence, when its release or CUDA build differs from the bundle's, or when it sees no
GPU where the driver lists one; the same torch passes silently. Fake `python` and `nvidia-smi`
programs stand in for the device's (CTest: torch_check).

  tests/scripts/torch_check_test.py
"""
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, 0o755)
    return path


def check(tmp, python_says, gpus, torch_lib=""):
    """(exit status, output) of stoker_torch_check against a bundle of torch 2.11.0+cu130 (CUDA 13.0)."""
    bin_dir = tempfile.mkdtemp(dir=tmp)
    py = fake(bin_dir, "python", f"echo '{python_says}'\n") if python_says is not None else ""
    listing = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\\n" for i in range(gpus))
    fake(bin_dir, "nvidia-smi", f'case "$1" in -L) printf "{listing}";; *) echo 580.65;; esac\n')
    run = subprocess.run(["bash", "-c", 'source "$1" && stoker_torch_check 2.11.0+cu130 13.0 "$2" "$3"', "_",
                          os.path.join(REPO, "scripts/torch_check.sh"), py, torch_lib],
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    return run.returncode, run.stdout.strip()


def expect(got, status, *parts):
    rc, out = got
    if rc != status or any(p not in out for p in parts) or (status == 0 and out):
        print(f"torch_check_test: expected exit {status} with {parts}, got {rc}: '{out}'", file=sys.stderr)
        sys.exit(1)
    if status == 1 and len(out.splitlines()) != 1:
        print(f"torch_check_test: expected one sentence, got '{out}'", file=sys.stderr)
        sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        expect(check(tmp, "2.11.0+cu130 13.0 0 0", 0), 0)  # the CPU machine that builds the bundle
        expect(check(tmp, "2.11.0+cu130 13.0 1 1", 1), 0)  # a GPU machine with the same torch
        expect(check(tmp, "2.10.0+cu128 12.8 1 1", 1), 1,
               "this machine's torch is 2.10.0+cu128 (CUDA 12.8) but the bundle was built against 2.11.0+cu130 "
               "(CUDA 13.0)", "install torch 2.11.0 built for CUDA 13.0")
        expect(check(tmp, "2.11.0+cpu None 0 0", 0), 1, "(CUDA None) but the bundle was built against")
        expect(check(tmp, "2.11.0+cu130 13.0 0 0", 1), 1, "nvidia-smi lists 1 GPU(s) (driver 580.65) but torch "
               "2.11.0+cu130 sees none (torch.cuda.is_available() is False, device_count() 0)")
        # No Python: the version from torch/version.py beside the libraries.
        lib = os.path.join(tmp, "torch", "lib")
        os.makedirs(lib)
        with open(os.path.join(tmp, "torch", "version.py"), "w") as f:
            f.write("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
        expect(check(tmp, None, 1, lib), 0)
        with open(os.path.join(tmp, "torch", "version.py"), "w") as f:
            f.write("__version__ = '2.11.0+cu126'\ncuda: Optional[str] = '12.6'\n")
        expect(check(tmp, None, 1, lib), 1, "this machine's torch is 2.11.0+cu126 (CUDA 12.6)")
        expect(check(tmp, "", 0, os.path.join(tmp, "none")), 1, "cannot tell which torch")
    print("torch_check_test: OK")


if __name__ == "__main__":
    main()
