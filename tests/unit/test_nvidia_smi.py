"""The ``nvidia-smi topo -m`` parser on real captures and on broken input."""
import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology import get_preset, load_nvidia_smi, topology_from_nvidia_smi


def nvlink_map(topo):
    return {(l.src, l.dst): (l.count, l.gbps) for l in topo.links if l.kind == "nvlink"}


def test_dgx1_v100_capture_matches_the_preset_nvlinks(fixtures_dir):
    parsed = load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt")
    assert parsed.gpu_ids == tuple(range(8))
    assert nvlink_map(parsed) == nvlink_map(get_preset("dgx1-v100"))
    assert len(nvlink_map(parsed)) == 32  # 16 bundles, both directions


def test_dgx1_v100_capture_pcie_tree(fixtures_dir):
    topo = load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt")
    # GPU pairs and one NIC share a PCIe switch (PIX); two switches per socket; sockets by QPI
    assert set(topo.neighbors("pcie0")) == {0, 1, "mlx5_0", "cpu0"}
    assert set(topo.neighbors("pcie3")) == {6, 7, "mlx5_3", "cpu1"}
    assert topo.link("cpu0", "cpu1").kind == "qpi"
    assert topo.capacity(0, "pcie0") == 12.0


def test_p100_rate_option(fixtures_dir):
    topo = load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt", nvlink_gbps=20.0)
    assert topo.capacity(0, 3) == 40.0 and topo.capacity(0, 1) == 20.0


@pytest.mark.parametrize("capture, links", [("dgx-a100", 12), ("hgx-h100", 18)])
def test_uniform_nv_means_one_nvswitch(fixtures_dir, capture, links):
    topo = load_nvidia_smi(fixtures_dir / f"nvidia-smi-topo-{capture}.txt")
    switches = [n for n in topo.nodes if n.kind == "switch" and n.detail == "nvswitch"]
    assert [n.id for n in switches] == ["nvswitch"]
    assert not topo.links_of_kind("nvlink")  # not a clique
    for gpu in range(8):
        assert topo.link(gpu, "nvswitch").count == links
        assert topo.capacity("nvswitch", gpu) == links * 25.0


def test_h100_nics_and_sockets(fixtures_dir):
    topo = load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-hgx-h100.txt")
    sockets = [n.id for n in topo.nodes if n.kind == "socket"]
    assert sockets == ["cpu0", "cpu1"]
    assert len([n for n in topo.nodes if n.kind == "nic"]) == 12
    # NIC1 is NODE to GPUs 0-3 only: directly on socket 0, no PCIe switch of its own
    assert topo.neighbors("NIC1") == ["cpu0"]


def test_a100_storage_nics_left_out(fixtures_dir):
    topo = load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-dgx-a100.txt")
    nics = {n.id for n in topo.nodes if n.kind == "nic"}
    assert nics == {f"mlx5_{i}" for i in (0, 1, 2, 3, 6, 7, 8, 9)}
    assert len([n for n in topo.nodes if n.kind == "socket"]) == 4  # one per NUMA affinity


def test_four_gpu_nv4_mesh_stays_point_to_point():
    header = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity"
    rows = [f"GPU{i}\t" + "\t".join("X" if i == j else "NV4" for j in range(4)) + "\t0-31" for i in range(4)]
    topo = topology_from_nvidia_smi("\n".join([header] + rows))
    assert len(topo.links_of_kind("nvlink")) == 12
    assert not any(n.kind == "switch" for n in topo.nodes)


def test_old_soc_cells_and_space_separated_copy():
    text = ("        GPU0    GPU1    mlx5_10 CPU Affinity\n"
            "GPU0     X      SOC     PHB     0-7\n"
            "GPU1    SOC      X      SOC     8-15\n")
    topo = topology_from_nvidia_smi(text)
    assert {n.id for n in topo.nodes if n.kind == "socket"} == {"cpu0", "cpu1"}
    assert topo.neighbors("mlx5_10") == ["cpu0"]


def test_ansi_escapes_are_ignored():
    text = "\x1b[4m\tGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tNV1\t0-3\nGPU1\tNV1\t X \t0-3\n"
    assert topology_from_nvidia_smi(text).link(0, 1).count == 1


@pytest.mark.parametrize("text, message", [
    ("", "empty input"),
    ("hello\tworld\n", "line 1: no GPU0 column"),
    ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV1\tFOO\n", r"line 3, column GPU1: the diagonal cell is 'FOO'"),
    ("\tGPU0\tGPU1\nGPU0\tX\tQQQ\nGPU1\tQQQ\tX\n", r"line 2, column GPU1: unknown cell 'QQQ'"),
    ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV2\tX\n", r"line 3: GPU1->GPU0 is NV2 but line 2 says"),
    ("\tGPU0\tGPU1\nGPU0\tX\nGPU1\tNV1\tX\n", r"line 2: row GPU0 has 1 cells, expected 2"),
    ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU7\tNV1\tX\n", r"line 3: row 'GPU7' is not a column"),
    ("\tGPU0\tGPU1\nGPU0\tX\tNV1\n\nLegend:\n", r"line 1: column GPU1 has no row"),
    ("\tGPU0\tmlx5_0\nGPU0\tX\tNV1\n", r"line 2, column mlx5_0: NV1 between GPU0 and a NIC"),
])
def test_bad_text_names_the_line(text, message):
    with pytest.raises(TopologyError, match=r"^capture.txt: " + message):
        topology_from_nvidia_smi(text, where="capture.txt")


def test_nic_rows_and_nic_legend():
    text = ("\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV4\tPIX\tSYS\t0-15\t0\tN/A\n"
            "GPU1\tNV4\t X \tSYS\tPIX\t16-31\t1\tN/A\n"
            "NIC0\tPIX\tSYS\t X \tSYS\n"
            "NIC1\tSYS\tPIX\tSYS\t X \n"
            "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n")
    topo = topology_from_nvidia_smi(text)
    assert topo.node("NIC1").detail == "mlx5_1"
    assert set(topo.neighbors("pcie1")) == {1, "NIC1", "cpu1"}
    assert topo.link(0, 1).count == 4  # two GPUs with NV4: point-to-point


def test_nvlink_everywhere_without_affinity_is_one_socket():
    # DGX-2 style: NV6 between all 16 GPUs hides every PCIe path; nothing says "other socket"
    header = "\t" + "\t".join(f"GPU{i}" for i in range(16))
    rows = [f"GPU{i}\t" + "\t".join("X" if i == j else "NV6" for j in range(16)) for i in range(16)]
    topo = topology_from_nvidia_smi("\n".join([header] + rows))
    assert [n.id for n in topo.nodes if n.kind == "socket"] == ["cpu0"]
    assert topo.link(15, "nvswitch").count == 6
