"""Runs an exported ONNX file in ONNX Runtime (CPU), for tests/recipe/export_onnx_test.cpp.

usage: onnx_run.py MODEL.onnx OUT_DIR [INPUT.f32 N,C,H,W]...
Checks MODEL.onnx with the onnx package's own checker (full_check: with its shape inference), opens
it with onnxruntime's CPUExecutionProvider and runs it on each float32 input (raw, native byte
order) in turn, writing OUT_DIR/logits<i>.txt (one value per line, row-major) for the i-th, and
OUT_DIR/model.json: the inputs' and outputs' names, element types and shapes as ONNX Runtime reads
them, the metadata_props, the opset, and the providers the session used. A run that fails writes
OUT_DIR/error<i>.txt with ONNX Runtime's message and goes on.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort


def main():
    model_file, out_dir = sys.argv[1:3]
    pairs = sys.argv[3:]
    onnx.checker.check_model(onnx.load(model_file), full_check=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_file, options, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta()
    model = onnx.load(model_file, load_external_data=False)
    described = {
        "inputs": [{"name": i.name, "type": i.type, "shape": i.shape} for i in session.get_inputs()],
        "outputs": [{"name": o.name, "type": o.type, "shape": o.shape} for o in session.get_outputs()],
        "metadata": dict(meta.custom_metadata_map),
        "opset": [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0],
        "providers": session.get_providers(),
    }
    with open(out_dir + "/model.json", "w") as f:
        json.dump(described, f)
    name = session.get_inputs()[0].name
    for i in range(0, len(pairs), 2):
        dims = [int(d) for d in pairs[i + 1].split(",")]
        x = np.fromfile(pairs[i], dtype=np.float32).reshape(dims)
        try:
            (logits,) = session.run(None, {name: x})
        except Exception as e:  # the test reads what ONNX Runtime said
            with open("%s/error%d.txt" % (out_dir, i // 2), "w") as f:
                f.write(str(e))
            continue
        np.savetxt("%s/logits%d.txt" % (out_dir, i // 2), logits.astype(np.float64).reshape(-1), fmt="%.17g")


if __name__ == "__main__":
    main()
