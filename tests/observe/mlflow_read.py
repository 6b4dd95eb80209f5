"""Reads runs back from an MLflow tracking server with MLflow's own client, for tests/observe/mlflow_test.cpp.

usage: mlflow_read.py TRACKING_URI EXPERIMENT OUT_JSON

Writes {"runs": [{"run_id", "run_name", "status", "params", "tags", "metrics": {key: [[step, value],
...]}, "artifacts": [path, ...], "config_yaml": text of the config.yaml artifact or null}]} for every
run of EXPERIMENT. Values that are not finite are written as the strings "NaN", "Infinity", "-Infinity".
"""
import json
import math
import sys
import tempfile

from mlflow.tracking import MlflowClient


def number(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def read_run(client, run):
    run_id = run.info.run_id
    metrics = {}
    for key in run.data.metrics:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        metrics[key] = [[m.step, number(m.value)] for m in history]
    artifacts = [a.path for a in client.list_artifacts(run_id)]
    config_yaml = None
    if "config.yaml" in artifacts:
        with tempfile.TemporaryDirectory() as folder:
            with open(client.download_artifacts(run_id, "config.yaml", folder), encoding="utf-8") as f:
                config_yaml = f.read()
    return {
        "run_id": run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "params": dict(run.data.params),
        "tags": dict(run.data.tags),
        "metrics": metrics,
        "artifacts": artifacts,
        "config_yaml": config_yaml,
    }


def main():
    uri, experiment_name, out = sys.argv[1:4]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(experiment_name)
    runs = [] if experiment is None else client.search_runs([experiment.experiment_id])
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"runs": [read_run(client, run) for run in runs]}, f)


if __name__ == "__main__":
    main()
