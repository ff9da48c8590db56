"""An out-of-place all-reduce peaks at no more than 3x its tensor per rank (input and result
included) on both cpu paths: the single copy (the default) and the packed path, which stages a
large call through the shared window in pieces (allreduce_peak_memory_script.py measures it); a
prescaled call takes the packed path in both modes, scaled stage by stage."""
import os
import re

import pytest

from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.parametrize("single_copy,prescale", [("1", "1"), ("0", "1"), ("1", "0.5")],
                         ids=["single_copy", "packed", "prescaled"])
@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_peak_memory_is_at_most_three_tensors(n, single_copy, prescale):
    out = run_ranks(n, ["python", os.path.join(HERE, "allreduce_peak_memory_script.py"), "96", prescale], timeout=180,
                  env={"BLINKFLOW_CPU_SINGLE_COPY": single_copy}).stdout
    peaks = re.findall(r"^PEAK rank (\d+) tensor_mib=96 rss_x=([\d.]+) pss_x=([\d.]+) path=(\w+) prescale=\S+$",
                       out, re.M)
    assert sorted(int(r) for r, _, _, _ in peaks) == list(range(n)), out
    want = "single_copy" if single_copy == "1" and prescale == "1" else "packed"
    for _, rss, pss, path in peaks:
        assert path == want, out  # the mode asked for is the one measured
        assert float(rss) <= 3.0 and float(pss) <= 3.0, out
