"""``python -m blinkflow.bench.tf_step --side blinkflow --local-baseline`` (the blinkflow side of
``bench tf-peers``): it times the local, synchronised and distributed steps and reports both
efficiencies, on a model small enough for CI."""
import json
import os

import pytest

from harness import run_ranks

pytest.importorskip("tensorflow")
#: MobileNet (v1) at a quarter width: TensorFlow traces its three steps (local, synchronised,
#: distributed) in about half the CPU time of MobileNetV2's; the bench's reporting is the same.
SMALL = ["--model", "MobileNet", "--alpha", "0.25", "--img-size", "32", "--batch-size", "2",
         "--num-warmup-batches", "1", "--num-iters", "2", "--num-batches-per-iter", "1"]


@pytest.mark.mpi
def test_step_reports_communication_and_sync_efficiency():
    out = run_ranks(2, ["python", "-m", "blinkflow.bench.tf_step", "--side", "blinkflow", "--local-baseline"] + SMALL,
                    timeout=400, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).stdout
    lines = [line for line in out.splitlines() if "RESULT " in line]
    assert len(lines) == 1, out[-3000:]  # worker 0 only
    result = json.loads(lines[0].split("RESULT ", 1)[1])
    assert result["workers"] == 2 and len(result["img_sec"]) == 2 and all(v > 0 for v in result["img_sec"])
    # Ratios of step times measured on a loaded CI machine: positive and finite, not near 1.
    for key in ("communication_efficiency", "sync_efficiency"):
        assert 0.0 < result[key] < 10.0, result
