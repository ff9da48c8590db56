"""The whole cuda backend (IPC arena, READY/FREE handshake over MPI, per-channel issue, fused
reduce launches, transfers between pretend hosts over MPI, the three-phase schedule) at 1, 2, 3
and 4 ranks on the CPU, through the same runner the CPU backend runs.

It runs the very case script the GPU tier runs (tests/gpu/cuda_backend_script.py), with
``tests/fake_cupy`` standing in for CuPy: shared memory for device memory and IPC, numpy for
the kernels, synchronous copies. What this cannot show (real stream/event ordering, the
kernels on a GPU) is what tests/gpu checks on a GPU machine; the kernels' bodies themselves
are run on the CPU by tests/unit/test_kernels_host.py.
"""
import os

import pytest

from harness import case_names, fake_cupy_env, launch, run_ranks

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(HERE, "gpu", "cuda_backend_script.py")


CONFIGS = [
    (1, "chain", 1, "device"), (2, "chain", 1, "device"), (4, "chain", 1, "device"), (4, "chain", 2, "device"),
    (4, "plan", 1, "device"), (4, "plan", 2, "device"), (3, "plan", 3, "device"), (3, "plan", "2+1", "device"),
    (2, "chain", 1, "runner"), (4, "chain", 2, "runner"), (4, "plan", 2, "runner"), (3, "plan", 3, "runner"),
    (3, "chain", "2+1", "runner"), (3, "plan", "2+1", "runner")]


def dtype_ops(config):
    """Every dtype with every op on the three-phase configurations (4 ranks, 2 hosts, the plan);
    elsewhere one op per dtype, turned by the configuration's place so that every pair still
    runs on several schedules (a pair costs about 0.3 CPU-seconds at 4 ranks on the fake)."""
    n, schedule, hosts, _ = config
    return "all" if (n, schedule, hosts) == (4, "plan", 2) else f"diagonal:{CONFIGS.index(config) % 4}"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,schedule,hosts,algorithm", CONFIGS)
@pytest.mark.parametrize("case", case_names(WORKER))
def test_cuda_backend_on_fake_cupy(n, schedule, hosts, algorithm, case):
    """The device executor where BLINKFLOW_ALGORITHM=device asks for it, the host-driven runner
    (``auto``'s choice on the cuda backend) where ``runner`` does. One launch per configuration,
    each case a test."""
    env = fake_cupy_env(TESTS_DTYPE_OPS=dtype_ops((n, schedule, hosts, algorithm)))
    launch(n, WORKER, args=[schedule, str(hosts), algorithm], env=env, timeout=240).expect(case)


def test_every_dtype_meets_every_op_on_several_schedules():
    """The diagonals' turns (the worker's ``dtype_op_pairs``: dtype i with op (i + K) mod 4) and
    the whole matrices together run each of the 6 x 4 pairs on at least three configurations."""
    runs = {(i, j): 0 for i in range(6) for j in range(4)}
    for config in CONFIGS:
        spec = dtype_ops(config)
        for i, j in runs:
            runs[i, j] += spec == "all" or j == (i + int(spec.partition(":")[2])) % 4
    assert min(runs.values()) >= 3, runs


@pytest.mark.mpi
@pytest.mark.slow
def test_gpu_bench_runs_on_fake_cupy():
    """The bench's code paths (kernel timing, backend vs staged MPI, NCCL skipped on a shared
    GPU, JSON) run; its numbers mean nothing on the fake and are not checked."""
    import json

    env = fake_cupy_env()
    out = run_ranks(2, ["python", "-m", "blinkflow.bench", "gpu", "--sizes", "4KiB,20KiB", "--iters", "2", "--json"],
                    timeout=240, env=env)
    result = json.loads(out.stdout)
    assert result["ranks"] == 2 and len(result["kernels"]) == 4
    assert [r["bytes"] for r in result["allreduce"]] == [4096, 20480]
    assert all("nccl_s" not in r and r["blinkflow_busbw_gbps"] > 0 for r in result["allreduce"])


@pytest.mark.mpi
@pytest.mark.slow
def test_runner_actions_bench_runs_on_fake_cupy():
    """The measurement behind the simulator's runner cost (docs/benchmarks.md, "Runner: host cost
    per action") runs and reports every rank's actions and cost per action."""
    import json

    out = run_ranks(2, ["python", "-m", "blinkflow.bench", "runner-actions", "--size", "64KiB", "--iters", "2",
                        "--json"], timeout=240, env=fake_cupy_env())
    result = json.loads(out.stdout)
    assert result["ranks"] == 2 and [r["rank"] for r in result["per_rank"]] == [0, 1]
    assert all(r["actions"] > 1 and r["us_per_action"] > 0 for r in result["per_rank"])
    assert result["us_per_action"] == max(r["us_per_action"] for r in result["per_rank"])
