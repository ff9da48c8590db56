"""Issue 18, findings 1-3: a call one rank refuses reaches every rank as one error, and the next
collectives pair correctly. One mpirun launch per world size runs every case of refusals_script.py."""
import os
import re

import pytest

from harness import case_names, launch, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "refusals_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("case", case_names(CASES))
def test_one_rank_refusing_a_call_never_desynchronises_the_ranks(case, n):
    launch(n, CASES).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("capacity", ["0", "4"], ids=["no-cache", "tiny-cache"])
@pytest.mark.parametrize("case", case_names(CASES))
def test_refusals_without_and_with_an_evicting_response_cache(case, capacity):
    launch(3, CASES, env={"BLINKFLOW_CACHE_CAPACITY": capacity}).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_short_soak_with_one_rank_faults_has_no_wrong_result_and_no_hang(n):
    """The CI cut of the 3-minute soak recorded in docs/reliability.md: 15 s of mixed collectives,
    named and unnamed, with one-rank refusals and mismatches in random positions."""
    out = run_ranks(n, ["python", os.path.join(HERE, "refusal_soak_script.py"), "--seconds", "15"]).stdout
    lines = re.findall(r"^SOAK rank (\d+) .*results=(\d+) refused=(\d+) .*wrong=(\d+) problems=(\d+)", out, re.M)
    assert sorted(int(r) for r, *_ in lines) == list(range(n)), out[-3000:]
    for _, results, refused, wrong, problems in lines:
        assert int(results) > 0 and int(refused) > 0 and wrong == "0" and problems == "0", out[-3000:]
