"""BLINKFLOW_AUTOTUNE=1 at 2 and 3 ranks: the coordinator's search changes the fusion threshold
while all-reduces run, every rank applies each change at the same place, and the best is kept."""
import os

import pytest

from harness import case_names, launch

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "autotune_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_autotune(n, case, tmp_path_factory):
    log = str(tmp_path_factory.getbasetemp() / f"autotune-{n}.csv")
    env = {"BLINKFLOW_AUTOTUNE": "1", "BLINKFLOW_AUTOTUNE_LOG_FILE": log, "BLINKFLOW_AUTOTUNE_WARMUP_SAMPLES": "1",
           "BLINKFLOW_AUTOTUNE_STEPS_PER_SAMPLE": "5", "BLINKFLOW_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6"}
    launch(n, CASES, env=env, timeout=180).expect(case)
