"""Which GPU a rank takes, from the host's table, CUDA_VISIBLE_DEVICES and its local rank."""
import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology.probe import probe_gpu


@pytest.fixture
def table(fixtures_dir):
    text = (fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt").read_text()
    return lambda: text


@pytest.mark.parametrize("env, local_rank, gpu", [
    ({}, 3, 3),                                   # all eight GPUs visible
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 1, 5),  # the local rank indexes the visible list
    ({"CUDA_VISIBLE_DEVICES": "6"}, 2, 6),        # a private GPU per rank
    ({"CUDA_VISIBLE_DEVICES": ""}, 0, None),      # every GPU hidden: a CPU rank
])
def test_gpu_of_a_rank(table, env, local_rank, gpu):
    assert probe_gpu("auto", False, local_rank, env, table)[0] == gpu


def test_too_many_ranks_for_the_visible_gpus(table):
    with pytest.raises(TopologyError, match="local rank 2 has no GPU: this host shows 2"):
        probe_gpu("auto", False, 2, {"CUDA_VISIBLE_DEVICES": "0,1"}, table)


def test_backend_choices(table):
    assert probe_gpu("cpu", False, 0, {}, table) == (None, None)
    assert probe_gpu("auto", True, 0, {}, table) == (None, None)  # BLINKFLOW_TOPOLOGY given: no probing
    assert probe_gpu("auto", False, 0, {}, lambda: None) == (None, None)
    with pytest.raises(TopologyError, match="BLINKFLOW_BACKEND=cuda but this host has no NVIDIA GPU"):
        probe_gpu("cuda", False, 0, {}, lambda: None)
