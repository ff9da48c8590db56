"""``blinkrun simulate`` prints the policy's choice and its predicted time, or says it cannot."""
import json

import pytest

from blinkflow.config import Config
from blinkflow.launcher.cli import main
from blinkflow.planner import make_plan
from blinkflow.schedule.policy import ALGORITHMS, Capabilities
from blinkflow.sim.api import simulate_plan
from blinkflow.sim.policy_prediction import predict
from blinkflow.topology.presets import get_preset


def _simulate(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", *argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    return out


def test_gpu_topologies_predict_the_cuda_runner_at_the_chunk_it_runs(capsys):
    out = _simulate(capsys, "--topology", "dgx1-v100", "--gpus", "0,1,4", "--collective", "allreduce",
                    "--size", "256MiB", "--json")
    policy = json.loads(out)["policy"]
    assert policy["backend"] == "cuda" and policy["algorithm"] == "runner"
    # Three local senders, three trees, four slots: the 256 MiB arena caps the 16 MiB chunk.
    assert policy["chunk_bytes"] == (256 << 20) // 36 // 256 * 256 and policy["simulated"] and policy["seconds"] > 0
    assert "beat NCCL's rings" in policy["why"]
    assert set(policy["algorithms"]) == {"runner", "device", "nccl"}


def test_the_cpu_single_copy_is_not_simulated(capsys):
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "allreduce", "--size", "64MiB")
    assert "policy (cpu backend): single_copy, chunk 1048576 bytes: not simulated" in out
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "broadcast", "--size", "64MiB")
    assert "policy (cpu backend): runner, chunk 4194304 bytes: predicted" in out


def test_a_small_cpu_allreduce_is_predicted_as_mpis_own_and_not_simulated(capsys):
    """What runs: the cpu backend hands a float32 all-reduce of at most 256 KiB to MPI, a float16
    one (MPI has no float16 arithmetic) to the runner."""
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "allreduce", "--size", "64KiB")
    assert "policy (cpu backend): mpi: not simulated" in out and "latency bound" in out
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "allreduce", "--size", "64KiB",
                    "--elem-bytes", "2")
    assert "policy (cpu backend): runner, chunk 4194304 bytes: predicted" in out


def test_one_rank_per_host_is_predicted_on_the_packed_runner_stage_by_stage(monkeypatch):
    """What runs: with one rank on a host nobody's memory is read in place (the single copy needs
    local peers), so a cpu all-reduce across hosts runs the packed runner, a stage at a time; a
    stage's end drains the pipeline, which the prediction charges (measured: 8 MiB stages took
    1.7x one 64 MiB stage between two hosts, docs/benchmarks.md)."""
    from blinkflow.schedule import policy

    topo = get_preset("2xcpu-host:1")
    plan = make_plan(topo, "allreduce", [0, 1])
    whole = predict(plan, topo, 64 << 20)
    assert (whole.choice.algorithm, whole.choice.stage_bytes, whole.bound) == ("runner", 64 << 20, "")
    assert whole.seconds == pytest.approx(simulate_plan(plan, topo, 64 << 20, chunk_elems=whole.choice.chunk_elems(4),
                                                        chunk_overhead_us=ALGORITHMS["runner"].cost_us("cpu")).result.seconds)
    staged = predict(plan, topo, 256 << 20)
    assert staged.bound == f"4 stages of at most {64 << 20} bytes, one after another"
    assert staged.seconds == pytest.approx(4 * whole.seconds)
    monkeypatch.setattr(policy, "CPU_CROSS_HOST_STAGE_BYTES", 8 << 20)
    small_stages = predict(plan, topo, 64 << 20)
    assert small_stages.bound.startswith("8 stages") and small_stages.seconds > 1.5 * whole.seconds
    assert predict(plan, topo, 5 * (8 << 20) + 4096).bound == f"6 stages of at most {8 << 20} bytes, one after another"
    two = get_preset("2xcpu-host:2")
    assert predict(make_plan(two, "allreduce"), two, 64 << 20).choice.algorithm == "single_copy"


def test_the_prediction_charges_the_algorithms_step_costs():
    """The runner pays its measured host cost per action (serially, per rank); the device
    executor one launch, a handshake per chunk and its connections' Little's-law rate."""
    from blinkflow.schedule import step_costs

    topo = get_preset("hgx-h100")
    plan = make_plan(topo, "allreduce")
    runner = predict(plan, topo, 256 << 20, config=Config(algorithm="runner"), caps=Capabilities("cuda"))
    device = predict(plan, topo, 256 << 20, config=Config(algorithm="device"),
                     caps=Capabilities("cuda", device_executor=True))
    assert (runner.choice.algorithm, device.choice.algorithm) == ("runner", "device")
    links_only = simulate_plan(plan, topo, 256 << 20, chunk_elems=device.choice.chunk_elems(4),
                               chunk_overhead_us=ALGORITHMS["device"].cost_us("cuda")).result.seconds
    assert device.seconds > links_only + step_costs.DEVICE_LAUNCH_US * 1e-6 * 0.99
    assert "host:" in runner.bound and runner.seconds > 100 * step_costs.RUNNER_US_PER_ACTION * 1e-6
    assert step_costs.device_connection_gbps(2, 1.0) == pytest.approx(2 * 512 * 4 * 16 / 1e-6 / 1e9)


def test_hgx_h100_prints_both_executors_with_their_chunks_and_picks_nccl(capsys):
    """The issue's command: the runner's and the device executor's predictions side by side, each
    at the chunk it really uses; the device executor at >= 300 GB/s bus bandwidth; NCCL chosen."""
    out = _simulate(capsys, "--topology", "hgx-h100", "--collective", "allreduce", "--size", "256MiB")
    assert "policy (cuda backend): nccl: predicted" in out
    assert "why: the plan's trees (257.1 GB/s) do not beat NCCL's rings (257.1 GB/s)" in out
    assert "runner (cuda backend): runner, chunk 1048576 bytes: predicted" in out  # 256 MiB / (8 * 8 * 4)
    assert "device (cuda backend): device, chunk 1048576 bytes: predicted" in out
    out = _simulate(capsys, "--topology", "hgx-h100", "--collective", "allreduce", "--size", "256MiB", "--json")
    algorithms = json.loads(out)["policy"]["algorithms"]
    assert algorithms["device"]["busbw_gbps"] >= 300
    assert algorithms["runner"]["busbw_gbps"] < algorithms["device"]["busbw_gbps"]
    assert algorithms["runner"]["chunk_bytes"] == 1 << 20 and algorithms["device"]["chunk_bytes"] == 1 << 20
