"""CPU inference latency of an exported ONNX file in ONNX Runtime, for bench/run_export_bench.sh.

usage: onnx_latency.py MODEL.onnx BATCH [--iters 20] [--warmup 3] [--threads 2] [--label NAME]
One InferenceSession (CPUExecutionProvider, --threads intra-op threads, the default graph
optimisations) runs a random float32 batch of the file's input shape with the batch dimension set
to BATCH (a --dynamic-batch export); prints one JSON line like stoker_bench_inference's: the median,
first and last quartile of the milliseconds per batch.
"""
import argparse
import json
import time

import numpy as np
import onnxruntime as ort


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("batch", type=int)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--label", default="")
    a = p.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = a.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(a.model, options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    shape = [a.batch] + list(spec.shape[1:])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ms = []
    for i in range(a.warmup + a.iters):
        start = time.perf_counter()
        session.run(None, {spec.name: x})
        if i >= a.warmup:
            ms.append(1000 * (time.perf_counter() - start))
    q = np.quantile(ms, [0.25, 0.5, 0.75], method="nearest")
    print(json.dumps({"engine": "onnxruntime", "model": a.label, "batch": a.batch, "threads": a.threads,
                      "ms_median": round(float(q[1]), 3), "ms_q1": round(float(q[0]), 3),
                      "ms_q3": round(float(q[2]), 3), "iters": a.iters, "onnxruntime": ort.__version__}))


if __name__ == "__main__":
    main()
