"""Which GPU a rank takes: local rank k drives CUDA device k, named in the topology by the
nvidia-smi index of the same PCI bus id, whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER do
to CUDA's numbering; and what blinkrun exports to pin each local rank."""
import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology.probe import parse_query_gpu, probe_gpu, visible_gpus
from blinkflow.topology.visible_devices import (GpuIdentity, format_uuid, normalise_bus_id, pin_for_local_rank,
                                                resolve_entries, visible_entries)

# Eight GPUs in nvidia-smi (PCI bus) order; GPU i sits on bus 0x10 * (i + 1).
HOST = [GpuIdentity(f"0000:{0x10 * (i + 1):02x}:00.0", f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}") for i in range(8)]


def cuda_view(*smi_indices):
    """What CUDA enumerates, in ordinal order, when it shows these physical GPUs."""
    return lambda: [HOST[i] for i in smi_indices]


@pytest.fixture
def table(fixtures_dir):
    text = (fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt").read_text()
    return lambda: text


def probe(table, local_rank, env=None, cuda=None, host=lambda: HOST):
    return probe_gpu("auto", False, local_rank, env or {}, table, cuda or (lambda: None), host)[0]


@pytest.mark.parametrize("order, local_rank, gpu", [
    ((0, 1, 2, 3, 4, 5, 6, 7), 3, 3),      # PCI order: CUDA ordinal = nvidia-smi index
    ((4, 0, 1, 2, 3, 5, 6, 7), 0, 4),      # FASTEST_FIRST put GPU 4 first: local rank 0 drives it
    ((2, 3, 0, 1), 1, 3),                  # CUDA_VISIBLE_DEVICES=2,3,0,1 (or their uuids)
    ((6,), 2, 6),                          # a private GPU per rank
])
def test_gpu_of_a_rank_follows_cuda_by_bus_id(table, order, local_rank, gpu):
    assert probe(table, local_rank, cuda=cuda_view(*order)) == gpu


def test_mig_instance_maps_to_its_gpu_by_bus_id(table):
    mig = GpuIdentity(HOST[5].bus_id, "MIG-12345678-aaaa-bbbb-cccc-000000000000")
    assert probe(table, 0, cuda=lambda: [mig]) == 5


def test_no_cuda_device_visible_is_a_cpu_rank(table):
    assert probe_gpu("auto", False, 0, {}, table, lambda: [], lambda: HOST) == (None, None)


@pytest.mark.parametrize("env, local_rank, gpu", [
    ({}, 3, 3),                                                     # all eight GPUs visible
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 1, 5),
    ({"CUDA_VISIBLE_DEVICES": f"{HOST[6].uuid},{HOST[2].uuid[:12]}"}, 1, 2),  # uuids, a unique prefix
    ({"CUDA_VISIBLE_DEVICES": "6"}, 2, 6),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0, None),                        # every GPU hidden: a CPU rank
])
def test_gpu_of_a_rank_without_cupy(table, env, local_rank, gpu):
    assert probe(table, local_rank, env) == gpu


@pytest.mark.parametrize("cuda, env", [(cuda_view(0, 1), {}), (None, {"CUDA_VISIBLE_DEVICES": "0,1"})])
def test_too_many_ranks_for_the_visible_gpus(table, cuda, env):
    with pytest.raises(TopologyError, match="local rank 2 has no GPU: its process sees 2 .*launch at most 2 ranks "
                                            "per host, or set BLINKFLOW_BACKEND=cpu"):
        probe(table, 2, env, cuda)


def test_backend_choices(table):
    assert probe_gpu("cpu", False, 0, {}, table) == (None, None)
    assert probe_gpu("auto", True, 0, {}, table) == (None, None)  # BLINKFLOW_TOPOLOGY given: no probing
    assert probe_gpu("auto", False, 0, {}, lambda: None) == (None, None)
    with pytest.raises(TopologyError, match="BLINKFLOW_BACKEND=cuda but this host has no NVIDIA GPU"):
        probe_gpu("cuda", False, 0, {}, lambda: None)


# ---- the pure pieces --------------------------------------------------------------------------
@pytest.mark.parametrize("raw, entries", [
    (None, None), ("", []), ("0,1,4", ["0", "1", "4"]), (" 3 , 2", ["3", "2"]), ("0,-1,2", ["0"]),
    ("GPU-1a2b,MIG-9f", ["GPU-1a2b", "MIG-9f"]), ("MIG-GPU-1a2b/1/0", ["MIG-GPU-1a2b/1/0"]),
    ("1,\u00b2,2", ["1"]),   # '²'.isdigit() is true; CUDA ends the list at an entry it cannot read
])
def test_visible_entries_read_as_cuda_reads_them(raw, entries):
    assert visible_entries(raw) == entries


def test_visible_gpus_maps_uuids_and_refuses_ambiguous_ones():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": f"{HOST[7].uuid},1"}, lambda: HOST) == [7, 1]
    with pytest.raises(TopologyError, match="names 8 GPUs of this host"):
        visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-0"}, lambda: HOST)
    with pytest.raises(TopologyError, match="names no GPU"):
        visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-ffff"}, lambda: HOST)
    with pytest.raises(TopologyError, match="MIG instance"):
        resolve_entries(["MIG-1234"], HOST)


def test_bus_ids_and_uuids_normalise():
    assert normalise_bus_id("00000000:1B:00.0") == normalise_bus_id("0000:1b:00.0") == "0000:1b:00.0"
    assert normalise_bus_id(b"1b:00.0") == "0000:1b:00.0"
    assert format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    with pytest.raises(TopologyError, match="not a PCI bus id"):
        normalise_bus_id("GPU0")
    assert parse_query_gpu("00000000:1B:00.0, GPU-ab, NVIDIA H100\n\n") == [
        GpuIdentity("0000:1b:00.0", "GPU-ab", "NVIDIA H100")]


# ---- what blinkrun exports ---------------------------------------------------------------------
def test_pin_names_the_hosts_devices_by_uuid_in_cuda_order():
    devices = [HOST[i] for i in (2, 3, 0, 1)]   # CUDA_VISIBLE_DEVICES=2,3,0,1 (or FASTEST_FIRST)
    pins = [pin_for_local_rank(k, 3, "2,3,0,1", devices) for k in range(3)]
    assert {p.visible for p in pins} == {",".join(h.uuid for h in devices[:3])}   # one list for the host
    assert [p.ordinal for p in pins] == [0, 1, 2] and [p.device for p in pins] == devices[:3]


def test_pin_gives_each_rank_its_own_mig_instance():
    pins = [pin_for_local_rank(k, 2, "MIG-aaaa,MIG-bbbb", None) for k in range(3)]
    assert [(p.visible, p.ordinal) for p in pins] == [("MIG-aaaa", 0), ("MIG-bbbb", 0), (None, None)]


def test_pin_leaves_the_user_alone_where_it_cannot_name_one_device_per_rank():
    assert pin_for_local_rank(0, 2, None, None).visible is None             # CUDA could not be asked
    assert pin_for_local_rank(0, 2, "", []).ordinal is None                  # no device: a CPU rank
    shared = pin_for_local_rank(3, 4, None, [HOST[0]])                       # four ranks share one GPU
    assert (shared.visible, shared.ordinal) == (None, 0)
    no_uuid = pin_for_local_rank(1, 2, None, [GpuIdentity(HOST[0].bus_id, ""), HOST[1]])
    assert (no_uuid.visible, no_uuid.ordinal) == (None, 1)
