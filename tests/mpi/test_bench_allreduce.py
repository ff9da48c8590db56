"""``python -m blinkflow.bench allreduce`` runs under mpirun and reports both sides (tiny sizes)."""
import json

import pytest

from mpi_launch import run_mpi


@pytest.mark.mpi
@pytest.mark.parametrize("via", ["backend", "api"])
def test_bench_allreduce_json(via):
    out = run_mpi(2, ["python", "-m", "blinkflow.bench", "allreduce", "--sizes", "4KB,64KB", "--via", via, "--reps", "3", "--json"],
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
