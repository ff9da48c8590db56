"""The call-shape policy's inputs are agreed at init (tests/mpi/policy_agreement_script.py): one
rank with another chunk or algorithm setting stops every rank with a ConfigError naming it."""
import os

import pytest

from harness import launch

SCRIPT = os.path.join(os.path.dirname(__file__), "policy_agreement_script.py")
ENV = {"BLINKFLOW_BACKEND": "cpu"}


@pytest.mark.mpi
@pytest.mark.parametrize("variable,value", [("BLINKFLOW_CHUNK_BYTES", "65536"), ("BLINKFLOW_ALGORITHM", "runner")])
def test_one_rank_with_another_policy_input_stops_every_rank(variable, value):
    case = "a_different_input_on_one_rank_stops_every_rank"
    launch(3, SCRIPT, args=[variable, value], env=ENV, cases=[case], timeout=120).expect(case)


@pytest.mark.mpi
def test_the_same_inputs_everywhere_start():
    case = "the_same_inputs_everywhere_start"
    launch(2, SCRIPT, args=["BLINKFLOW_ALGORITHM", "auto"], env=ENV, cases=[case], timeout=120).expect(case)
