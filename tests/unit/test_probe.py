"""Live probing pieces that run without a GPU: CUDA_VISIBLE_DEVICES and NVML through a fake."""
import types

import pytest

from blinkflow.topology import topology_from_nvidia_smi
from blinkflow.topology.probe import nvml_topology_text, probe_host_topology, visible_gpus


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", []), ("0,1,4", [0, 1, 4]), (" 3 , 2", [3, 2]), ("0,-1,2", [0]), ("1,--1", [1]),
])
def test_visible_gpus(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_gpus(env) == expected


def fake_nvml(bus_ids, nvlinks, levels):
    """A stand-in for pynvml: nvlinks[i] = remote bus id of each active link of GPU i."""
    nvml = types.SimpleNamespace(NVML_FEATURE_ENABLED=1)
    pci = types.SimpleNamespace
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(bus_ids)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetPciInfo = lambda h: pci(busId=bus_ids[h].encode())

    def state(h, link):
        if link >= len(nvlinks[h]):
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1

    nvml.nvmlDeviceGetNvLinkState = state
    nvml.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: pci(busId=nvlinks[h][link])
    nvml.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: levels[frozenset((a, b))]
    return nvml


def test_nvml_point_to_point_and_pcie_levels():
    bus = ["00000000:06:00.0", "00000000:07:00.0", "00000000:85:00.0"]
    nvml = fake_nvml(bus, [["0000:07:00.0"] * 2, ["0000:06:00.0"] * 2, []],
                     {frozenset((0, 1)): 10, frozenset((0, 2)): 50, frozenset((1, 2)): 50})
    text = nvml_topology_text(nvml)
    topo = topology_from_nvidia_smi(text)
    assert topo.link(0, 1).count == 2 and topo.link(0, 2) is None
    assert text.splitlines()[3] == "GPU2\tSYS\tSYS\tX"


def test_nvml_nvswitch_fabric_becomes_one_switch():
    bus = [f"00000000:{b}:00.0" for b in ("07", "0f", "47", "4e")]
    switches = [f"00000000:c{k}:00.0" for k in range(6)]
    nvml = fake_nvml(bus, [[s for s in switches for _ in range(2)]] * 4, {})
    topo = probe_host_topology(text_source=lambda: nvml_topology_text(nvml))
    assert topo.link(0, "nvswitch").count == 12 and not topo.links_of_kind("nvlink")


def test_no_gpu_means_no_topology():
    assert probe_host_topology(text_source=lambda: None) is None
    broken = types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("no driver")))
    assert nvml_topology_text(broken) is None
