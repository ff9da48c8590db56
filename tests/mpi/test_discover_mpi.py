"""discover_job across real MPI ranks: every rank gets the same answer, or the same error."""
import json
import pathlib

import pytest

from harness import run_ranks

SCRIPT = str(pathlib.Path(__file__).with_name("discover_job_script.py"))
CPU = {"BLINKFLOW_BACKEND": "cpu"}


def discover(n, env):
    out = run_ranks(n, ["python", SCRIPT], timeout=120, env=env).stdout
    answers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(a["rank"] for a in answers) == list(range(n))
    return answers


def same_everywhere(answers, key):
    values = {json.dumps(a[key]) for a in answers}
    assert len(values) == 1, values
    return json.loads(values.pop())


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 4])
def test_cpu_job_one_host(n):
    answers = discover(n, CPU)
    assert same_everywhere(answers, "devices") == list(range(n))
    assert same_everywhere(answers, "compute") == list(range(n))
    same_everywhere(answers, "digest")
    assert same_everywhere(answers, "hosts") == [answers[0]["processor"]] * n


@pytest.mark.mpi
def test_split_hosts_makes_two_hosts_of_four_ranks():
    answers = discover(4, {**CPU, "BLINKFLOW_SPLIT_HOSTS": "2"})
    assert same_everywhere(answers, "hosts") == ["host0", "host0", "host1", "host1"]
    assert same_everywhere(answers, "topo_hosts") == ["host0", "host1"]
    assert same_everywhere(answers, "devices") == [0, 1, 2, 3]


@pytest.mark.mpi
def test_topology_override_and_its_error_reach_every_rank():
    answers = discover(2, {"BLINKFLOW_TOPOLOGY": "dgx1-v100"})
    assert same_everywhere(answers, "devices") == [0, 1]
    failed = discover(4, {"BLINKFLOW_TOPOLOGY": "cpu-host:2"})
    message = same_everywhere(failed, "error")
    assert "has 2 devices but the job has 4 ranks" in message
