"""Rank 0's merge of probes and the mapping onto a given topology, without MPI."""
import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology import get_preset
from blinkflow.topology.merge import RankProbe, assign_topology, merge_probes
from blinkflow.topology.presets import cpu_host
from blinkflow.topology.table import connection


def cpu_probes(hosts):
    local = {}
    out = []
    for rank, host in enumerate(hosts):
        out.append(RankProbe(rank, host, "box", local.setdefault(host, 0)))
        local[host] += 1
    return out


@pytest.fixture
def dgx1_text(fixtures_dir):
    return (fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt").read_text()


def gpu_probes(text, per_host):
    """per_host: {host: [gpu of each local rank]}; ranks numbered host by host."""
    out = []
    for host, gpus in per_host.items():
        for local, gpu in enumerate(gpus):
            out.append(RankProbe(len(out), host, host, local, gpu, text if local == 0 else None))
    return out


def test_cpu_single_host_is_the_cpu_host_preset():
    job = merge_probes(cpu_probes(["localhost"] * 3))
    assert job.topology == cpu_host(3)
    assert job.devices == (0, 1, 2) and job.hosts == ("localhost",) * 3


def test_cpu_two_hosts_matches_multi_host_shape():
    job = merge_probes(cpu_probes(["host0", "host0", "host1", "host1"]))
    preset = get_preset("2xcpu-host:2")
    assert (job.topology.nodes, job.topology.links) == (preset.nodes, preset.links)
    assert job.hosts == ("host0", "host0", "host1", "host1")


def test_cpu_round_robin_ranks_keep_global_ids():
    job = merge_probes(cpu_probes(["a", "b", "a", "b"]))
    topo = job.topology
    assert job.devices == (0, 1, 2, 3)
    assert topo.link(0, 2).kind == "shm" and topo.link(0, 1) is None
    assert connection(topo, 0, 1) == "NET/12"  # PCIe 12 to the NIC is the narrowest hop


def test_gpu_single_host_keeps_nvidia_smi_ids(dgx1_text):
    job = merge_probes(gpu_probes(dgx1_text, {"dgx": [0, 1, 4, 5]}))
    assert job.devices == (0, 1, 4, 5)
    assert job.topology.gpu_ids == (0, 1, 4, 5)
    assert job.topology.capacity(1, 5) == 50.0 and job.topology.link(0, 5) is None


def test_gpu_two_hosts_renumber_with_stride(dgx1_text):
    job = merge_probes(gpu_probes(dgx1_text, {"a": [0, 3], "b": [0, 3]}))
    assert job.devices == (0, 3, 8, 11)
    assert job.hosts == ("a", "a", "b", "b")
    topo = job.topology
    assert topo.capacity(8, 11) == 50.0 and topo.node(11).host == "b"
    assert topo.capacity("b/mlx5_0", "net") == 12.5
    assert connection(topo, 0, 8).startswith("NET/")


@pytest.mark.parametrize("probes, says", [
    (lambda t: [RankProbe(0, "h", "h", 0, 0, t), RankProbe(1, "h", "h", 1)], "ranks 0 have a GPU but ranks 1"),
    (lambda t: [RankProbe(0, "h", "h", 0, 2, t), RankProbe(1, "h", "h", 1, 2)], "ranks 0 and 1 on h both use GPU 2; launch one rank per GPU .this host has 8., or set BLINKFLOW_BACKEND=cpu"),
    (lambda t: [RankProbe(0, "h", "h", 0, 9, t)], "was given GPU 9"),
    (lambda t: [RankProbe(0, "h", "h", 0, 1)], "no rank on host h sent"),
    (lambda t: [RankProbe(0, "h", "h", 0), RankProbe(1, "h", "h", 1, error="boom")], "rank 1 on h: boom"),
    (lambda t: [RankProbe(1, "h", "h", 0)], "expected 0..0"),
])
def test_merge_errors_say_which_ranks(dgx1_text, probes, says):
    with pytest.raises(TopologyError, match="topology discovery: .*" + says):
        merge_probes(probes(dgx1_text))


def test_assign_topology_subsets_in_order():
    job = assign_topology(get_preset("dgx1-v100"), cpu_probes(["x"] * 3))
    assert job.devices == (0, 1, 2) and job.topology.gpu_ids == (0, 1, 2)
    two_hosts = assign_topology(get_preset("2xcpu-host:2"), cpu_probes(["x"] * 4))
    assert two_hosts.hosts == ("host0", "host0", "host1", "host1")


def test_assign_topology_errors():
    with pytest.raises(TopologyError, match="BLINKFLOW_TOPOLOGY: topology 'cpu-host:2' has 2 devices but the job has 3"):
        assign_topology(cpu_host(2), cpu_probes(["x"] * 3))
    probes = [RankProbe(0, "a", "m1", 0), RankProbe(1, "b", "m2", 0)]
    with pytest.raises(TopologyError, match="ranks 0 and 1 run on different machines"):
        assign_topology(cpu_host(2), probes)
