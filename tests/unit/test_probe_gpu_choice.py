"""Which GPU a rank takes, from the host's table, CUDA_VISIBLE_DEVICES and its local rank."""
import pytest

from blinkflow.config import Config
from blinkflow.errors import TopologyError
from blinkflow.topology.discover import _probe_gpu


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
    assert _probe_gpu(Config(), local_rank, env, table)[0] == gpu


def test_too_many_ranks_for_the_visible_gpus(table):
    with pytest.raises(TopologyError, match="local rank 2 has no GPU: this host shows 2"):
        _probe_gpu(Config(), 2, {"CUDA_VISIBLE_DEVICES": "0,1"}, table)


def test_backend_choices(table):
    assert _probe_gpu(Config(backend="cpu"), 0, {}, table) == (None, None)
    assert _probe_gpu(Config(), 0, {}, lambda: None) == (None, None)
    with pytest.raises(TopologyError, match="BLINKFLOW_BACKEND=cuda but this host has no NVIDIA GPU"):
        _probe_gpu(Config(backend="cuda"), 0, {}, lambda: None)
