"""An out-of-place all-reduce peaks at no more than 3x its tensor per rank (input and result
included) on the default cpu path (allreduce_peak_memory.py measures it)."""
import os
import re

import pytest

from mpi_launch import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_peak_memory_is_at_most_three_tensors(n):
    out = run_mpi(n, ["python", os.path.join(HERE, "allreduce_peak_memory.py"), "96"], timeout=180).stdout
    peaks = re.findall(r"^PEAK rank (\d+) tensor_mib=96 rss_x=([\d.]+) pss_x=([\d.]+)$", out, re.M)
    assert sorted(int(r) for r, _, _ in peaks) == list(range(n)), out
    for _, rss, pss in peaks:
        assert float(rss) <= 3.0 and float(pss) <= 3.0, out
