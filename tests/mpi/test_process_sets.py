"""Process sets (issue 17): one mpirun launch per world size runs every case of
process_set_script.py; on a DGX-1 topology a set's all-reduce plan is the plan of its own GPUs,
at the rate ``blinkrun plan --gpus`` reports for them."""
import json
import os
import re

import pytest

from blinkrun_helpers import run_blinkrun
from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "process_set_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_process_sets(case, n):
    launch(n, CASES, timeout=300).expect(case)


def _on_a_dgx1():
    return launch(4, CASES, timeout=300, env={"BLINKFLOW_TOPOLOGY": "dgx1-v100"})


@pytest.mark.mpi
@pytest.mark.xdist_group("process_sets_on_a_dgx1")
@pytest.mark.parametrize("case", case_names(CASES))
def test_process_sets_on_a_dgx1(case):
    """Four ranks on DGX-1 V100 GPUs 0-3 (``BLINKFLOW_TOPOLOGY``): every case again."""
    _on_a_dgx1().expect(case)


@pytest.mark.mpi
@pytest.mark.xdist_group("process_sets_on_a_dgx1")
def test_a_sets_plan_on_a_dgx1_is_its_gpus_plan():
    """The set of ranks 1-3 plans on GPUs 1, 2 and 3 alone (Blink's partial allocation)."""
    _on_a_dgx1().expect("plan_of_a_set_is_the_plan_of_its_devices")
    out = _on_a_dgx1().stdout
    reported = re.findall(r"^SETPLAN rank (\d+) devices ([\d,]+) rate (\S+)$", out, re.M)
    assert sorted(int(r) for r, _, _ in reported) == [1, 2, 3], out[-2000:]
    assert {devices for _, devices, _ in reported} == {"1,2,3"}
    plan = run_blinkrun(["plan", "--topology", "dgx1-v100", "--gpus", "1,2,3", "--collective", "allreduce", "--json"])
    assert plan.returncode == 0, plan.stderr
    want = json.loads(plan.stdout)["rate_gbps"]
    full = json.loads(run_blinkrun(["plan", "--topology", "dgx1-v100", "--gpus", "0,1,2,3", "--collective",
                                    "allreduce", "--json"]).stdout)["rate_gbps"]
    assert want != full  # the subset's plan is its own, not the job's
    for _, _, rate in reported:
        assert float(rate) == pytest.approx(want, rel=1e-12), (rate, want)
