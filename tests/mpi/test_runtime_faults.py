"""Fault tolerance, stall inspection and the timeline, each in its own small mpirun launch."""
import json
import os
import re

import pytest

from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = os.path.join(HERE, "runtime_faults_script.py")


def _run_with(options, nprocs, args, env, timeout):
    return run_ranks(nprocs, ["python", FAULTS] + args, env=env, timeout=timeout, check=False, mpi_options=options)


@pytest.mark.mpi
@pytest.mark.parametrize("options", [["--with-ft", "ulfm"], ["--enable-recovery"]], ids=["ulfm", "recovery"])
def test_killed_rank_makes_every_survivor_raise_naming_it(options, tmp_path):
    """ULFM: MPI returns MPI_ERR_PROC_FAILED. --enable-recovery without ULFM: MPI would block
    forever, the pid watchdog notices. Either way every survivor raises within 30 s."""
    n = 3
    proc = _run_with(options, n, ["kill"], {"FAULTS_DIR": str(tmp_path)}, timeout=90)
    out = proc.stdout
    survivors = re.findall(r"^SURVIVOR rank (\d+) ShutdownError rank=(\d+) after ([\d.]+)s: (.*)$", out, re.M)
    assert sorted(int(r) for r, *_ in survivors) == list(range(n - 1)), out + proc.stderr[-3000:]
    for _, named, seconds, message in survivors:
        assert int(named) == n - 1 and f"rank {n - 1}" in message
        assert float(seconds) < 30
    assert len(re.findall(r"^AGAIN rank \d+ rank=2$", out, re.M)) == n - 1, out


@pytest.mark.mpi
def test_survivors_that_shut_down_after_a_dead_rank_still_exit(tmp_path):
    """shutdown() after the error used to clear the state the exit hook reads, so the process
    hung in MPI_Finalize waiting for the dead rank; init() again hung in MPI as well."""
    n = 3
    proc = _run_with(["--enable-recovery"], n, ["kill", "shutdown"], {"FAULTS_DIR": str(tmp_path)}, timeout=90)
    out = proc.stdout
    assert len(re.findall(r"^REINIT rank \d+ rank=2$", out, re.M)) == n - 1, out + proc.stderr[-3000:]
    # Reaching here at all means no survivor hung (timeout=90); the first to exit leaves with status 1
    # and mpirun then ends the other.
    assert re.search(r"^END rank", out, re.M) and proc.returncode != 0, out


@pytest.mark.mpi
def test_a_rank_whose_background_loop_dies_takes_the_job_down(tmp_path):
    proc = _run_with(["--enable-recovery"], 3, ["crash"], {"FAULTS_DIR": str(tmp_path)}, timeout=90)
    crashed = dict(re.findall(r"^CRASHED rank (\d+) (rank=\S+) after", proc.stdout, re.M))
    assert crashed == {"0": "rank=2", "1": "rank=2", "2": "rank=2"}, proc.stdout + proc.stderr[-3000:]
    assert "injected backend failure" in proc.stdout + proc.stderr
    assert re.search(r"^CRASHED rank 2 .*failed while running allreduce of 'boom'", proc.stdout, re.M), proc.stdout


@pytest.mark.mpi
def test_stall_warns_then_shuts_down():
    env = {"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "1", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "3"}
    proc = run_ranks(3, ["python", FAULTS, "stall"], timeout=90, env=env)
    assert re.search(r"'stuck': missing on ranks \[2\] \(ready on ranks \[0, 1\]", proc.stderr), proc.stderr
    # Whichever of the two stalled tensors outlasts the shutdown time first is named.
    stalled = re.findall(r"^STALLED rank (\d+): .*('stuck' missing on ranks \[2\]|'only.mine' missing on "
                         r"ranks \[0, 1\])", proc.stdout, re.M)
    stalled = [r for r, _ in stalled]
    assert sorted(map(int, stalled)) == [0, 1, 2], proc.stdout


def _events(path, complete):
    with open(path) as f:
        text = f.read()
    assert text.rstrip().endswith("]") == complete, text[-200:]
    return json.loads(text if complete else text + "]")  # the format allows the missing bracket


@pytest.mark.mpi
@pytest.mark.parametrize("abort", [False, True], ids=["clean", "killed"])
def test_timeline_is_valid_chrome_trace(abort, tmp_path):
    path = str(tmp_path / "trace.json")
    args = ["timeline"] + (["abort"] if abort else [])
    proc = _run_with([], 2, args, {"BLINKFLOW_TIMELINE": path}, timeout=90)
    if not abort:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for p, rank in [(path, 0), (str(tmp_path / "trace.rank1.json"), 1)]:
        events = _events(p, complete=not abort)
        names = {(e["name"], e["ph"]) for e in events}
        for phase in ["QUEUED", "NEGOTIATE", "ALLREDUCE", "COPY_IN", "COPY_OUT", "BROADCAST", "ALLGATHER"]:
            assert (phase, "B") in names and (phase, "E") in names, (phase, sorted(names))
        assert all(e["pid"] == rank for e in events)
        # The backend's own phases, reported through BackendContext.timeline, land on the tracks
        # of the fused tensors (the cpu backend: the policy's algorithm, and the runner's schedule
        # for the large call, MPI's own all-reduce for the small ones).
        phases = {e["name"] for e in events if e.get("args", {}).get("step") == "collective"}
        assert {"RUN_SCHEDULE", "ALGORITHM_RUNNER", "ALGORITHM_MPI"} <= phases, phases
        tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
        assert {"tl.0", "tl.3", "tl.bcast", "tl.gather"} <= tracks
        # Begin/end pairs balance on every track of a clean run.
        if not abort:
            depth = {}
            for e in events:
                if e["ph"] in "BE":
                    depth[e["tid"]] = depth.get(e["tid"], 0) + (1 if e["ph"] == "B" else -1)
                    assert depth[e["tid"]] >= 0
            assert set(depth.values()) == {0}


@pytest.mark.mpi
@pytest.mark.parametrize("setting,here,there", [
    ("BLINKFLOW_CPU_SINGLE_COPY=0", "BLINKFLOW_CPU_SINGLE_COPY=1", "BLINKFLOW_CPU_SINGLE_COPY=0"),
    # issue 18: a topology set on one rank only was silently ignored (rank 0 alone reads it)
    ("BLINKFLOW_TOPOLOGY=cpu-host:3", "BLINKFLOW_TOPOLOGY=None", "BLINKFLOW_TOPOLOGY=cpu-host:3"),
], ids=["single-copy", "topology"])
def test_ranks_with_different_settings_fail_init_everywhere(setting, here, there):
    proc = _run_with([], 3, ["config", setting], {}, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = re.findall(r"^CONFIG rank (\d): (.*)$", proc.stdout, re.M)
    assert sorted(int(r) for r, _ in lines) == [0, 1, 2], proc.stdout + proc.stderr
    for _, message in lines:
        assert f"ranks [0, 1]: {here}" in message and f"ranks [2]: {there}" in message, message


@pytest.mark.mpi
@pytest.mark.parametrize("where,error", [("transfer", "BackendError"), ("setup", "MemoryError")])
def test_a_failed_single_copy_transfer_raises_on_every_rank(where, error, tmp_path):
    """A transfer refused mid-way, or the chunk reducer failing to set up after the entry
    barrier (peers already write into the rank's result), on the last rank."""
    proc = _run_with([], 3, ["cma", where], {"FAULTS_DIR": str(tmp_path)}, timeout=90)
    if "NOCMA" in proc.stdout:
        pytest.skip("no cross-memory attach between processes here")
    failed = dict(re.findall(r"^CMAFAIL rank (\d): (.*)$", proc.stdout, re.M))
    assert sorted(failed) == ["0", "1", "2"], proc.stdout + proc.stderr[-3000:]
    for message in failed.values():
        assert f"single-copy all-reduce failed (rank 2: {error}: injected" in message, message
