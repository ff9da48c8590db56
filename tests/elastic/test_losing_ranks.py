"""Losing ranks (loss_script.py, one launch of 4 ranks under ULFM on DGX-1 V100 GPUs 0-3):
no survivor applies a partial result, the re-formed job runs the plan ``blinkrun plan --gpus
0,1,3`` shows, and below the minimum the job ends naming the lost rank, leaving no process."""
import functools
import json
import os
import re
import subprocess
import uuid

import pytest

from blinkrun_helpers import run_blinkrun
from harness import fake_cupy_env, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "loss_script.py")
#: On every rank's command line, so the test can look for processes the job left behind.
TOKEN = f"elastic-loss-{uuid.uuid4().hex[:12]}"
pytestmark = pytest.mark.xdist_group("elastic_losing_ranks")


@functools.lru_cache(maxsize=None)
def _job():
    env = {"BLINKFLOW_TOPOLOGY": "dgx1-v100", "BLINKFLOW_ELASTIC_MIN_NP": "3",
           # The packed path over the runner: the victim dies after a chosen number of chunk transfers.
           "BLINKFLOW_CPU_SINGLE_COPY": "0"}
    return run_ranks(4, ["python", SCRIPT, TOKEN], env=env, timeout=180, check=False,
                     mpi_options=["--with-ft", "ulfm"])


def _lines(tag):
    return re.findall(rf"^{tag} rank (\d+)(.*)$", _job().stdout, re.M)


def _context():
    return _job().stdout[-3000:] + _job().stderr[-3000:]


@pytest.mark.mpi
def test_a_rank_killed_inside_an_allreduce_fails_the_call_on_every_survivor_and_no_partial_result_is_applied():
    failed = _lines("FAILED")
    assert sorted(int(r) for r, _ in failed) == [0, 1, 3], _context()
    assert all("RanksLostError ranks=[2]" in rest for _, rest in failed), failed
    # Each survivor then recomputed the all-reduce of the same inputs on the new job, exactly.
    assert sorted(int(r) for r, _ in _lines("RECOMPUTED")) == [0, 1, 3], _context()
    # The old runtime's threads left their waits on the dead rank's shared-memory ring at once
    # (a reset that had to give up on them takes RETIRE_JOIN_S, 10 s).
    seconds = [float(rest) for _, rest in _lines("RESET_SECONDS")]
    assert len(seconds) == 3 and max(seconds) < 5, seconds


@pytest.mark.mpi
def test_the_reformed_job_runs_the_plan_of_the_surviving_gpus():
    resets = _lines("RESET")
    assert sorted((int(r), rest.strip()) for r, rest in resets) == [
        (0, "new 0 lost [2] devices 0,1,3"), (1, "new 1 lost [2] devices 0,1,3"),
        (3, "new 2 lost [2] devices 0,1,3")], _context()
    ran = json.loads(re.search(r"^PLAN (.*)$", _job().stdout, re.M).group(1))
    shown = run_blinkrun(["plan", "--topology", "dgx1-v100", "--gpus", "0,1,3", "--collective", "allreduce", "--json"])
    assert shown.returncode == 0, shown.stderr
    want = json.loads(shown.stdout)
    assert ran["rate_gbps"] == pytest.approx(want["rate_gbps"], rel=1e-12)
    assert ran["trees"] == want["trees"]
    full = json.loads(run_blinkrun(["plan", "--topology", "dgx1-v100", "--gpus", "0,1,2,3", "--collective",
                                    "allreduce", "--json"]).stdout)
    assert full["rate_gbps"] != want["rate_gbps"]  # re-planned, not the old job's trees on fewer GPUs


@pytest.mark.mpi
def test_below_min_np_the_job_ends_naming_the_lost_rank_and_leaves_no_process():
    job = _job()
    too_few = _lines("TOOFEW")
    assert sorted(int(r) for r, _ in too_few) == [0, 1], _context()
    for _, rest in too_few:
        assert rest.startswith(" lost=[2] left=2:") and "rank 2 of the 3-rank job is gone" in rest, rest
        assert "BLINKFLOW_ELASTIC_MIN_NP" in rest
    assert job.returncode != 0
    left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert TOKEN not in left, [line for line in left.splitlines() if TOKEN in line]


@pytest.mark.mpi
def test_on_gpus_a_survivor_keeps_its_gpu_when_its_local_rank_changes():
    """Under the fake CuPy here (the cuda backend's code paths, not a device's timing)."""
    env = fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY="cpu-host:3", FAKE_CUPY_DEVICES="3")
    proc = run_ranks(3, ["python", os.path.join(HERE, "cuda_loss_script.py")], env=env, timeout=180, check=False,
                     mpi_options=["--with-ft", "ulfm"])
    found = sorted(re.findall(r"^GPU rank (\d+) new (\d+) ordinal (\d+) device (\d+) ok$", proc.stdout, re.M))
    assert found == [("0", "0", "0", "0"), ("2", "1", "2", "2")], proc.stdout[-3000:] + proc.stderr[-3000:]
    # The old job's device memory and IPC mappings are released at the reset, not kept until exit.
    memory = re.findall(r"^GPU memory of the old job (\d+) allocations, (\d+) left after the reset$", proc.stdout, re.M)
    assert len(memory) == 2 and all(int(n) > 0 and int(k) == 0 for n, k in memory), memory
