"""The call-shape policy's inputs are agreed at init (tests/mpi/policy_agreement_main.py): one
rank with another chunk or algorithm setting stops every rank with a ConfigError naming it."""
import os

import pytest

from mpi_launch import run_mpi

SCRIPT = os.path.join(os.path.dirname(__file__), "policy_agreement_main.py")


@pytest.mark.mpi
@pytest.mark.parametrize("variable,value,says", [("BLINKFLOW_CHUNK_BYTES", "65536", "BLINKFLOW_CHUNK_BYTES=65536"),
                                                 ("BLINKFLOW_ALGORITHM", "runner", "BLINKFLOW_ALGORITHM=runner")])
def test_one_rank_with_another_policy_input_stops_every_rank(variable, value, says):
    out = run_mpi(3, ["python", SCRIPT, variable, value], timeout=120, env={"BLINKFLOW_BACKEND": "cpu"}).stdout
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 3 and "STARTED" not in out, out[-3000:]
    for line in refused:
        assert "ConfigError" in line and says in line, line


@pytest.mark.mpi
def test_the_same_inputs_everywhere_start():
    out = run_mpi(2, ["python", SCRIPT, "BLINKFLOW_ALGORITHM", "auto"], timeout=120,
                  env={"BLINKFLOW_BACKEND": "cpu"}).stdout
    assert out.count("STARTED") == 2, out[-3000:]
