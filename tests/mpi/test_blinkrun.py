"""blinkrun end to end: rank-tagged output, per-rank logs, and a job that fails or is stopped
goes down within seconds, naming the first rank that failed. Each test runs the real console
script under a timeout."""
from __future__ import annotations

import importlib.util
import os
import random
import signal
import time

import pytest

from blinkrun_helpers import PY, popen_blinkrun, run_blinkrun

pytestmark = pytest.mark.mpi

RANKS = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.rank, c.size, c.allreduce(c.rank))"
BF_INIT = "import blinkflow as bf; bf.init(); print(bf.rank(), bf.size())"
# Every rank enters a collective; rank 2 fails instead, so the others would wait forever.
RAISES = """
import time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.barrier()
if c.rank == 2:
    raise ValueError("rank 2 fails on purpose at %.3f" % time.time())
c.allreduce(1)
"""
SLEEPS = """
import os, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.barrier()
with open(os.path.join(sys.argv[1], "pid.%d" % c.rank), "w") as f:
    f.write(str(os.getpid()))
if c.rank != 2 or len(sys.argv) < 3:
    c.allreduce(1)
time.sleep(300)
"""


# Ranks in a blinkflow job (shared memory, the runtime's threads) that then sleep.
BF_SLEEPS = """
import os, sys, time
import numpy as np
import blinkflow as bf
bf.init()
bf.allreduce(np.ones(1 << 16, np.float32))
with open(os.path.join(sys.argv[1], "pid.%d" % bf.rank()), "w") as f:
    f.write(str(os.getpid()))
time.sleep(300)
"""


def tagged(stdout: str, stream: str = "stdout"):
    return sorted(line for line in stdout.splitlines() if f"<{stream}>:" in line)


def test_four_ranks_print_rank_tagged_lines():
    proc = run_blinkrun(["-np", "4", PY, "-c", RANKS])
    assert proc.returncode == 0, proc.stderr
    assert tagged(proc.stdout) == [f"[{r}]<stdout>: {r} 4 6" for r in range(4)]
    assert "@@blinkrun@@" not in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("blinkflow.runtime.api") is None,
                    reason="blinkflow.runtime.api is not importable yet (the runtime lands from branch runtime)")
def test_bf_init_on_four_ranks():
    proc = run_blinkrun(["-np", "4", PY, "-c", BF_INIT], timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert tagged(proc.stdout) == [f"[{r}]<stdout>: {r} 4" for r in range(4)]


def test_output_filename_writes_per_rank_logs(tmp_path):
    script = "import sys; from mpi4py import MPI; r = MPI.COMM_WORLD.rank; print('out', r); print('err', r, file=sys.stderr)"
    proc = run_blinkrun(["-np", "2", "--output-filename", str(tmp_path / "logs"), "--verbose", PY, "-c", script])
    assert proc.returncode == 0, proc.stderr
    assert "mpirun -np 2 " in proc.stderr and "rank_exec --output-dir " in proc.stderr   # --verbose: the mpirun command
    for r in range(2):
        assert (tmp_path / "logs" / f"rank.{r}" / "stdout").read_text() == f"out {r}\n"
        assert (tmp_path / "logs" / f"rank.{r}" / "stderr").read_text() == f"err {r}\n"
        assert f"[{r}]<stderr>: err {r}" in proc.stderr


def test_a_rank_that_raises_takes_the_job_down():
    proc = run_blinkrun(["-np", "4", PY, "-c", RAISES], timeout=90)
    ended = time.time()
    assert proc.returncode == 1, proc.stderr
    assert "rank 2 (host " in proc.stderr and "failed first" in proc.stderr
    raised_at = float(proc.stderr.split("fails on purpose at ")[1].split()[0])
    assert ended - raised_at < 10, f"blinkrun took {ended - raised_at:.1f}s after the failure"
    summary = proc.stderr[proc.stderr.index("blinkrun: rank 2"):]
    assert "ValueError: rank 2 fails on purpose" in summary and "Traceback" in summary


def test_a_python_rank_under_a_shell_that_raises_takes_the_job_down():
    # Each rank is sh -> (a background sleep, python): the failure must take down all of them.
    script = RAISES.replace("c.rank == 2", "c.rank == 1").replace("rank 2 fails", "rank 1 fails")
    seconds = str(random.randint(4000, 9000))
    proc = run_blinkrun(["-np", "2", "sh", "-c", f'sleep {seconds} & "$0" -c "$1"', PY, script], timeout=90)
    assert proc.returncode == 1, proc.stderr
    assert "rank 1 (host " in proc.stderr and "ValueError: rank 1 fails on purpose" in proc.stderr
    deadline = time.time() + 5
    while _processes_running(["sleep", seconds]) and time.time() < deadline:
        time.sleep(0.2)
    assert not _processes_running(["sleep", seconds]), "a rank's child outlived the job"


def _processes_running(argv):
    """Live processes whose command line is exactly ``argv``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:-1] == [a.encode() for a in argv] and _alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_non_python_rank_failing_names_its_status():
    script = 'r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; if [ "$r" = 1 ]; then echo "disk full" >&2; exit 5; fi; sleep 60'
    proc = run_blinkrun(["-np", "2", "sh", "-c", script], timeout=60)
    assert proc.returncode == 5, proc.stderr
    assert "rank 1 (host " in proc.stderr and "exited with status 5" in proc.stderr
    assert "blinkrun:     disk full" in proc.stderr


def _wait_for_files(folder, names, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all((folder / n).exists() and (folder / n).read_text() for n in names):
            return {n: int((folder / n).read_text()) for n in names}
        if proc.poll() is not None:
            raise AssertionError(f"blinkrun ended early ({proc.returncode}): {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"ranks did not start within {timeout}s")


def _descendants(root: int):
    """Every process below ``root``, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cleanup(proc, pids):
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)


def test_a_rank_killed_with_sigkill_takes_the_job_down(tmp_path):
    proc = popen_blinkrun(["-np", "4", PY, "-c", SLEEPS, str(tmp_path), "rank 2 sleeps"])
    pids = set()
    try:
        pids = set(_wait_for_files(tmp_path, [f"pid.{r}" for r in range(4)], proc).values())
        victim = int((tmp_path / "pid.2").read_text())
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        out, err = proc.communicate(timeout=30)
        assert time.time() - killed_at < 10
        assert proc.returncode == 128 + signal.SIGKILL, err
        assert "rank 2 (host " in err and "killed by SIGKILL" in err
        time.sleep(0.5)
        assert not [p for p in pids if _alive(p)]
    finally:
        _cleanup(proc, pids)


def test_sigint_to_blinkrun_leaves_no_rank_alive(tmp_path):
    proc = popen_blinkrun(["-np", "4", PY, "-c", SLEEPS, str(tmp_path)])
    tree = set()
    try:
        _wait_for_files(tmp_path, [f"pid.{r}" for r in range(4)], proc)
        tree = _descendants(proc.pid)
        assert len(tree) >= 9, tree   # mpirun, 4 wrappers, 4 ranks
        proc.send_signal(signal.SIGINT)
        sent = time.time()
        out, err = proc.communicate(timeout=30)
        time.sleep(max(0.0, 5 - (time.time() - sent)))
        survivors = [p for p in tree if _alive(p)]
        assert not survivors, f"alive 5 s after SIGINT: {survivors}"
        assert proc.returncode == 128 + signal.SIGINT, err
        assert "stopped by SIGINT" in err
    finally:
        _cleanup(proc, tree)


def test_sigkill_to_blinkrun_ends_every_rank_and_the_next_start_reclaims(tmp_path):
    """Issue 18, finding 6: blinkrun killed with SIGKILL (it can run no handler) left mpirun and
    every rank running, and its scratch folder in the temp folder; segments of a job killed with
    mpirun stayed in /dev/shm. Now mpirun follows blinkrun (parent-death signal) and takes the
    ranks with it within seconds, and the next start removes what the dead job left."""
    import glob
    import tempfile

    proc = popen_blinkrun(["-np", "3", PY, "-c", BF_SLEEPS, str(tmp_path)])
    tree = set()
    try:
        _wait_for_files(tmp_path, [f"pid.{r}" for r in range(3)], proc, timeout=120)
        tree = _descendants(proc.pid)
        assert len(tree) >= 7, tree   # mpirun, 3 wrappers, 3 ranks
        scratch = glob.glob(os.path.join(tempfile.gettempdir(), f"blinkrun-{proc.pid}-*"))
        assert scratch, "blinkrun's scratch folder should carry its pid"
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.time()
        proc.communicate(timeout=30)
        while [p for p in tree if _alive(p)] and time.time() - killed < 15:
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], f"alive 15 s after blinkrun was killed: {tree}"
        segment = "/dev/shm/sm_segment.blinkflow-test.%d.dead.0" % os.getuid()
        with open(segment, "wb") as f:
            f.write(b"\0" * 4096)
        os.utime(segment, (time.time() - 3600, time.time() - 3600))   # a killed job's, an hour old
        assert run_blinkrun(["-np", "1", PY, "-c", "pass"]).returncode == 0
        assert not [p for p in scratch if os.path.exists(p)], "the dead blinkrun's scratch folder stayed"
        assert not os.path.exists(segment), "an unused segment of a dead job stayed in /dev/shm"
    finally:
        _cleanup(proc, tree)
