"""The NCCL topology XML parser on hand-written dumps and on broken XML."""
import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology import get_preset, load_nccl_xml, topology_from_nccl_xml


def nvlink_map(topo):
    return {(l.src, l.dst): (l.count, l.gbps) for l in topo.links if l.kind == "nvlink"}


def test_dgx1_dump_matches_preset(fixtures_dir):
    topo = load_nccl_xml(fixtures_dir / "nccl-topo-dgx1-v100.xml")
    assert topo.gpu_ids == tuple(range(8))
    assert nvlink_map(topo) == nvlink_map(get_preset("dgx1-v100"))
    assert topo.node(3).detail == "sm70"
    # GPU 0 sits behind the PLX switch 03:00.0 on socket 0, with NIC mlx5_0 (EDR, 12.5 GB/s)
    assert set(topo.neighbors("pci:0000:03:00.0")) == {0, 1, "mlx5_0", "cpu0"}
    assert topo.node("mlx5_0").detail == "12.5GB/s"
    assert topo.capacity(0, "pci:0000:03:00.0") == 12.0  # Gen3 x16


def test_nvswitch_dump_has_one_switch_with_12_links(fixtures_dir):
    topo = load_nccl_xml(fixtures_dir / "nccl-topo-dgx-a100.xml")
    assert [n.id for n in topo.nodes if n.detail == "nvswitch"] == ["nvswitch"]
    for gpu in range(8):
        assert topo.link(gpu, "nvswitch").count == 12
        assert topo.capacity(gpu, "nvswitch") == 300.0
        assert topo.capacity(gpu, topo.neighbors(gpu)[0]) > 0
    assert topo.capacity(0, "pci:0000:01:00.0") == 24.0  # Gen4 x16
    # root port -> switch chain is kept
    assert "pci:0000:00:01.1" in topo.neighbors("pci:0000:01:00.0")


def test_p100_sm60_uses_20_gbps_and_one_sided_listing():
    xml = """<system version="1"><cpu numaid="0">
      <pci busid="0000:04:00.0" class="0x030200"><gpu dev="0" sm="60"><nvlink target="0000:05:00.0" count="1" tclass="0x030200"/></gpu></pci>
      <pci busid="0000:05:00.0" class="0x030200"><gpu dev="1" sm="60"/></pci>
    </cpu></system>"""
    topo = topology_from_nccl_xml(xml)
    assert topo.capacity(0, 1) == 20.0 and topo.capacity(1, 0) == 20.0


def test_per_process_dump_numbers_gpus_by_bus_id():
    xml = """<system version="1"><cpu numaid="0">
      <pci busid="0000:b0:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="8"><gpu dev="0" sm="80"/></pci>
      <pci busid="0000:10:00.0" class="0x030200"><gpu dev="0" sm="80"/></pci>
    </cpu></system>"""
    topo = topology_from_nccl_xml(xml)
    assert topo.gpu_ids == (0, 1)
    assert topo.capacity(1, "cpu0") == 12.0  # bus 0xb0 is the second GPU, Gen4 x8


@pytest.mark.parametrize("xml, message", [
    ('<system version="1">\n<cpu numaid="0">\n<pci busid="1">\n</cpu></system>', r"line 4: malformed XML"),
    ('<topology/>', r"line 1: the root element is <topology>"),
    ('<system>\n<cpu numaid="0"/>\n</system>', r"no <gpu> element"),
    ('<system>\n<cpu numaid="0">\n<pci class="0x030200"><gpu dev="0"/></pci>\n</cpu></system>',
     r"line 3: <pci> has no 'busid'"),
    ('<system>\n<cpu>\n<pci busid="0000:01:00.0" class="0x030200">\n<gpu dev="0">\n'
     '<nvlink target="0000:09:00.0" count="2" tclass="0x030200"/>\n</gpu></pci></cpu></system>',
     r"line 5: nvlink target 0000:09:00.0 is no GPU"),
    ('<system>\n<cpu>\n<pci busid="0000:01:00.0" class="0x030200" link_speed="7 GT/s">\n<gpu dev="0"/>\n'
     '</pci></cpu></system>', r"line 3: link_speed '7 GT/s' is no PCIe generation"),
    ('<system>\n<cpu>\n<pci busid="0000:01:00.0" class="0x030200" link_speed="8.0. GT/s">\n<gpu dev="0"/>\n'
     '</pci></cpu></system>', r"line 3: link_speed '8.0. GT/s' is no PCIe generation"),  # was float() crashing
])
def test_bad_xml_names_the_line(xml, message):
    with pytest.raises(TopologyError, match=r"^dump.xml: " + message):
        topology_from_nccl_xml(xml, where="dump.xml")
