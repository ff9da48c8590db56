"""``python -m blinkflow.bench allreduce`` runs under mpirun and reports both sides (tiny sizes)."""
import json

import pytest

from harness import run_ranks


@pytest.mark.mpi
@pytest.mark.parametrize("via", ["backend", "api"])
def test_bench_allreduce_json(via):
    out = run_ranks(2, ["python", "-m", "blinkflow.bench", "allreduce", "--sizes", "4KiB,64KiB", "--via", via, "--reps", "3", "--json"],
                    timeout=240).stdout
    report = json.loads(out[out.index("{"):out.rindex("}") + 1])
    assert report["ranks"] == 2 and report["via"] == via
    assert [r["bytes"] for r in report["allreduce"]] == [4096, 65536]
    for r in report["allreduce"]:
        for side in ("blinkflow", "mpi", "mpi_out_of_place"):
            assert r[side]["seconds"] > 0 and r[side]["reps"] == 3
            assert r[side]["q1_seconds"] <= r[side]["seconds"] <= r[side]["q3_seconds"]
            assert r[side]["busbw_gbps"] == pytest.approx(r[side]["algbw_gbps"])  # 2(n-1)/n = 1 at n = 2
        assert r["speedup"] == pytest.approx(r["mpi"]["seconds"] / r["blinkflow"]["seconds"])
        assert r["speedup_out_of_place"] == pytest.approx(r["mpi_out_of_place"]["seconds"] / r["blinkflow"]["seconds"])
    small = report["small_tensors"]
    assert small["tensors"] == 200 and small["speedup"] > 0 and small["speedup_out_of_place"] > 0


@pytest.mark.mpi
def test_bench_separate_times_each_side_in_its_own_job(tmp_path):
    """``bench separate`` launches blinkflow's and MPI's jobs in turn (two trees here: the same
    checkout under two names) and reports every case for each, with the ratios to MPI."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "blinkflow.bench", "separate", "--np", "2", "--rounds", "1",
                           "--sizes", "4KiB", "--tree", f"a={here}", "--tree", f"b={here}", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ranks"] == 2 and set(report["cases"]) == {"4KiB", "200 x 16KiB"}
    for row in report["cases"].values():
        assert set(row) == {"a", "b", "MPI"} and all(v["median_s"] > 0 for v in row.values())
        assert row["a"]["vs_mpi"] == pytest.approx(row["MPI"]["median_s"] / row["a"]["median_s"])


@pytest.mark.mpi
def test_bench_control_times_both_paths():
    """``python -m blinkflow.bench control``: a control message's round trip through the mailbox
    and through MPI, both measured (x86-64: both paths exist)."""
    import re

    out = run_ranks(2, ["python", "-m", "blinkflow.bench", "control", "--trips", "50", "--blocks", "2"], timeout=120).stdout
    times = dict(re.findall(r"^  (mpi|shm): ([0-9.]+) us", out, flags=re.M))
    assert set(times) == {"mpi", "shm"}, out
    assert all(float(t) > 0 for t in times.values())


@pytest.mark.mpi
def test_bench_latency_stamps_the_route_a_small_allreduce_takes():
    """``bench latency``: a 1-float all-reduce's median beside MPI's, and its route stamped hop by
    hop: user thread, background thread, one negotiation round, the backend's one MPI call (the
    policy's ``mpi`` algorithm for a call this small), the result handed back."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "blinkflow.bench", "latency", "--rounds", "1", "--calls", "60",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    ours, theirs = report["runs"]["blinkflow"][0], report["runs"]["mpi"][0]
    assert ours["median_us"] > 0 and theirs["median_us"] > 0
    stamped = ours["stamped"]
    assert stamped["calls"] == 60 and stamped["on_route"] > 30, stamped
    route = [stamped["hops"][0]["from"]] + [hop["to"] for hop in stamped["hops"]]
    assert route == ["call>", "queue>", "queue<", "drain>", "drain<", "mpi_wait>", "mpi_wait<", "execute>", "backend>",
                     "backend<", "mpi_wait>", "mpi_wait<", "complete>", "complete<", "execute<", "call<"], route
    assert sum(hop["us"] for hop in stamped["hops"]) == pytest.approx(stamped["total_us"], rel=0.5)
