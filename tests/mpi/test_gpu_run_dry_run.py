"""The prepared GPU run (tests/gpu/run_on_gpu_machine.sh) as a dry run under the fake CuPy: its
steps in the order of what they prove, each under its limit with the watchdog inside it, the steps
that cannot apply here said so in the summary, and a budget too small for a step leaving it
unstarted ("no time") instead of cut off. The workers' own cases run in full elsewhere
(test_device_executor_fake_cupy.py); here each step runs its smallest configuration."""
import os
import subprocess
import sys

import pytest

from harness import fake_cupy_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "gpu", "run_on_gpu_machine.sh")
ORDER = ["loopback", "device-executor-np2", "bench-gpu-loopback", "bench-gpu-np2-runner", "bench-gpu-np2-device",
         "nccl", "torch", "xla-cuda", "gpu-tests", "user-default-np2"]


def dry_run(tmp_path, **settings):
    env = {**os.environ, **fake_cupy_env(FAKE_CUPY_SMS="132"), "VENV": sys.prefix, "EXPECT_GPU": "0",
           "BENCH_SIZES": "64KiB", "BENCH_ITERS": "2", "LOOPBACK_ARGS": "2 allreduce_float32_sum",
           "LOOPBACK_COUNTS": "2", "DEVICE_NPS": "2", "DEVICE_CASES": "allreduce_sum_and_max_of_floats",
           "SKIP": "torch gpu-tests", "OUT": str(tmp_path / "out"), "LOGS": str(tmp_path / "logs"), **settings}
    done = subprocess.run(["bash", SCRIPT], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    summary = (tmp_path / "logs" / "summary.txt").read_text().splitlines()
    return done, dict(line.split(None, 1) for line in summary), [line.split()[0] for line in summary]


@pytest.mark.mpi
@pytest.mark.slow
def test_the_gpu_run_proves_its_steps_in_order_under_the_fake_cupy(tmp_path):
    done, summary, order = dry_run(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:]
    assert order == ORDER, done.stdout[-4000:]
    ran = [name for name in ORDER if name not in ("nccl", "torch", "xla-cuda", "gpu-tests")]
    assert {name: summary[name].split()[0] for name in ran} == {name: "ok" for name in ran}, done.stdout[-4000:]
    assert summary["nccl"].startswith("not measured: NCCL needs one GPU per rank")
    assert summary["xla-cuda"].startswith("not run: TensorFlow")
    assert summary["torch"] == summary["gpu-tests"] == "skipped (SKIP)"
    assert "(limit 90s, watchdog 60s)" in done.stdout
    assert "2 virtual ranks allreduce float32 sum" in (tmp_path / "logs" / "loopback.log").read_text()
    assert (tmp_path / "out" / "gpu-logs.tar.gz").stat().st_size > 0


@pytest.mark.mpi
def test_a_step_without_its_whole_limit_left_is_not_started(tmp_path):
    done, summary, order = dry_run(tmp_path, BUDGET="70")
    assert done.returncode == 0, done.stdout[-4000:]
    unstarted = [name for name in ORDER if name not in ("nccl", "torch", "xla-cuda", "gpu-tests")]
    assert all(summary[name].startswith("no time (") and summary[name].endswith("needs 90s)") for name in unstarted), \
        done.stdout[-4000:]
    assert not (tmp_path / "logs" / "loopback.log").exists()
