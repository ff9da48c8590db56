import json

import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology import Link, Node, Topology, bidirectional, load_topology, save_topology, topology_from_dict


def _triangle():
    nodes = [Node(0, "gpu"), Node(1, "gpu"), Node(2, "gpu"), Node("sw", "switch", detail="pcie")]
    links = bidirectional(0, 1, "nvlink", 2, 25.0) + bidirectional(1, 2, "nvlink", 1, 25.0)
    links += bidirectional(0, "sw", "pcie", 1, 12.0) + bidirectional(2, "sw", "pcie", 1, 12.0)
    return Topology.build("tri", nodes, links)


def test_json_round_trip(tmp_path):
    topo = _triangle()
    path = tmp_path / "t.json"
    save_topology(topo, path)
    again = load_topology(path)
    assert again == topo
    assert again.digest() == topo.digest()
    assert json.loads(path.read_text())["schema"] == 1


def test_parallel_links_merge():
    nodes = [Node(0, "gpu"), Node(1, "gpu")]
    topo = Topology.build("m", nodes, [Link(0, 1, "nvlink", 1, 25.0), Link(0, 1, "nvlink", 1, 25.0)])
    assert topo.link(0, 1).count == 2 and topo.capacity(0, 1) == 50.0


def test_subset_drops_devices_and_dead_switches():
    topo = _triangle()
    sub = topo.subset([0, 1])
    assert sub.compute_ids == (0, 1)
    # the PCIe switch now reaches only GPU 0: a dead end, dropped
    assert all(n.is_compute for n in sub.nodes)
    assert sub.capacity(0, 1) == 50.0


def test_subset_unknown_device_names_it():
    with pytest.raises(TopologyError, match="device 7 is not in topology"):
        _triangle().subset([0, 7])


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["nodes"][0].update(kind="tpu"), "nodes[0].kind"),
    (lambda d: d["links"][0].update(gbps=-1), "links[0]"),
    (lambda d: d["links"][0].update(dst=99), "links[0]"),
    (lambda d: d.update(schema=7), "schema"),
])
def test_bad_json_names_the_field(mutate, field):
    data = _triangle().to_dict()
    mutate(data)
    with pytest.raises(TopologyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        topology_from_dict(data, where="t.json")


def test_malformed_json_names_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema": 1,\n "nodes": [}\n')
    with pytest.raises(TopologyError, match=r"bad.json: line 2"):
        load_topology(path)
