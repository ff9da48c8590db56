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


def test_gpu_topologies_predict_the_cuda_runner_at_its_chunk(capsys):
    out = _simulate(capsys, "--topology", "dgx1-v100", "--gpus", "0,1,4", "--collective", "allreduce",
                    "--size", "256MiB", "--json")
    policy = json.loads(out)["policy"]
    assert policy["backend"] == "cuda" and policy["algorithm"] == "runner"
    assert policy["chunk_bytes"] == 16 << 20 and policy["simulated"] and policy["seconds"] > 0


def test_the_cpu_single_copy_is_not_simulated(capsys):
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "allreduce", "--size", "64MiB")
    assert "policy (cpu backend): single_copy, chunk 1048576 bytes: not simulated" in out
    out = _simulate(capsys, "--topology", "cpu-host:4", "--collective", "broadcast", "--size", "64MiB")
    assert "policy (cpu backend): runner, chunk 4194304 bytes: predicted" in out


def test_the_prediction_charges_the_algorithms_per_chunk_cost():
    topo = get_preset("hgx-h100")
    plan = make_plan(topo, "allreduce")
    runner = predict(plan, topo, 256 << 20)
    device = predict(plan, topo, 256 << 20, config=Config(algorithm="device"),
                     caps=Capabilities("cuda", device_executor=True))
    assert (runner.choice.algorithm, device.choice.algorithm) == ("runner", "device")
    again = simulate_plan(plan, topo, 256 << 20, chunk_elems=device.choice.chunk_elems(4),
                          chunk_overhead_us=ALGORITHMS["device"].cost_us("cuda"))
    assert device.seconds == again.result.seconds
