"""Runs an exported TorchScript file in Python PyTorch, for tests/recipe/export_test.cpp.

usage: torchscript_run.py MODEL.pt INPUT.f32 N,C,H,W OUT_DIR
Loads MODEL.pt with torch.jit.load, runs it in eval mode on the float32 input (raw, native byte
order, N*C*H*W values) and writes OUT_DIR/logits.txt (one value per line, row-major) and
OUT_DIR/state_dict.txt (one "name shape" line per entry of the module's state_dict, the shape
as 16x8x3x3, or "scalar").
"""
import sys

import torch


def main():
    model_file, input_file, shape, out_dir = sys.argv[1:5]
    dims = [int(d) for d in shape.split(",")]
    with open(input_file, "rb") as f:
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(dims)
    model = torch.jit.load(model_file, map_location="cpu")
    model.eval()
    with torch.no_grad():
        logits = model(x)
    with open(out_dir + "/logits.txt", "w") as f:
        for v in logits.to(torch.float64).flatten().tolist():
            f.write("%.17g\n" % v)
    with open(out_dir + "/state_dict.txt", "w") as f:
        for name, t in model.state_dict().items():
            f.write("%s %s\n" % (name, "x".join(str(s) for s in t.shape) or "scalar"))


if __name__ == "__main__":
    main()
