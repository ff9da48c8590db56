"""The presets carry the figures their docstrings cite (DESIGN §4, white papers)."""
import pytest

from blinkflow.topology import get_preset, preset_names


def nvlinks_out(topo, gpu):
    return sum(l.count for l in topo.out_links(gpu) if l.kind in ("nvlink", "nvswitch"))


def nvlink_gbps_out(topo, gpu):
    return sum(l.gbps for l in topo.out_links(gpu) if l.kind in ("nvlink", "nvswitch"))


@pytest.mark.parametrize("name, gpus, links, gbps", [
    ("dgx1-p100", 8, 4, 80.0), ("dgx1-v100", 8, 6, 150.0), ("dgx2", 16, 6, 150.0),
    ("dgx-a100", 8, 12, 300.0), ("hgx-h100", 8, 18, 450.0),
])
def test_nvlink_per_gpu(name, gpus, links, gbps):
    topo = get_preset(name)
    assert topo.gpu_ids == tuple(range(gpus))
    for g in topo.gpu_ids:
        assert nvlinks_out(topo, g) == links
        assert nvlink_gbps_out(topo, g) == gbps


def test_dgx1_v100_double_links_follow_design():
    topo = get_preset("dgx1-v100")
    doubles = {(a, b) for a in range(8) for b in range(a + 1, 8) if topo.link(a, b) and topo.link(a, b).count == 2}
    assert doubles == {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


@pytest.mark.parametrize("name, per_link", [("dgx-a100", 24.0), ("hgx-h100", 48.0), ("pcie-8gpu", 12.0)])
def test_pcie_generation(name, per_link):
    topo = get_preset(name)
    assert topo.capacity(0, "pcie0") == per_link
    assert topo.capacity("cpu0", "cpu1") == 10.0


def test_cpu_host_and_multi_host():
    assert len(get_preset("cpu-host:5").links) == 5 * 4
    two = get_preset("2xdgx1-v100")
    assert two.compute_ids == tuple(range(16)) and two.hosts == ("host0", "host1")
    assert two.capacity(8, 11) == 50.0  # host 1 GPU 0 -> GPU 3, NV2
    assert sorted(two.neighbors("net")) == [f"host{h}/nic{i}" for h in range(2) for i in range(4)]
    assert all(l.gbps == 12.5 for l in two.links_of_kind("net"))


def test_every_preset_builds():
    for name in preset_names():
        assert get_preset(name).compute_ids


@pytest.mark.parametrize("spec", ["99999999999xcpu-host:1", "2000xcpu-host:1", "cpu-host:5000", "65xdgx2", "4x4x128xcpu-host:1"])
def test_oversized_presets_are_refused_before_building(spec):
    # Without the cap, 99999999999xcpu-host:1 built nodes until memory ran out.
    from blinkflow.errors import TopologyError
    with pytest.raises(TopologyError, match="at most 1024 devices"):
        get_preset(spec)


@pytest.mark.parametrize("spec", ["cpu-host:\u00b2", "cpu-host:-1", "cpu-host:1.5"])
def test_cpu_host_argument_must_be_a_count(spec):
    from blinkflow.errors import TopologyError
    with pytest.raises(TopologyError, match="needs a number of ranks"):
        get_preset(spec)


def test_largest_allowed_presets_build():
    assert len(get_preset("64xdgx2").compute_ids) == 1024
    assert len(get_preset("1024xcpu-host:1").hosts) == 1024
