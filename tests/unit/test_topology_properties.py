"""Property tests over random topologies: subsets and the JSON round trip."""
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from blinkflow.topology import LINK_KINDS, Node, Topology, bidirectional, topology_from_dict


@st.composite
def topologies(draw):
    devices = draw(st.integers(1, 7))
    switches = draw(st.integers(0, 3))
    nodes = [Node(i, draw(st.sampled_from(["gpu", "cpu"])), draw(st.sampled_from(["h0", "h1"])))
             for i in range(devices)]
    nodes += [Node(f"sw{k}", "switch", detail=draw(st.sampled_from(["pcie", "nvswitch", "net"])))
              for k in range(switches)]
    ids = [n.id for n in nodes]
    links = []
    pairs = draw(st.sets(st.tuples(st.integers(0, len(ids) - 1), st.integers(0, len(ids) - 1)), max_size=20))
    for a, b in pairs:
        if a < b:
            links += bidirectional(ids[a], ids[b], draw(st.sampled_from(LINK_KINDS)), draw(st.integers(1, 4)),
                                   draw(st.sampled_from([6.0, 10.0, 12.5, 25.0])))
    return Topology.build("random", nodes, links)


@st.composite
def topology_and_devices(draw):
    topo = draw(topologies())
    keep = draw(st.lists(st.sampled_from(topo.compute_ids), min_size=1, unique=True))
    return topo, keep


@settings(max_examples=60, deadline=None)
@given(topologies())
def test_json_round_trip(topo):
    again = topology_from_dict(json.loads(topo.to_json()))
    assert again == topo and again.digest() == topo.digest()


@settings(max_examples=80, deadline=None)
@given(topology_and_devices())
def test_subset_invariants(case):
    topo, keep = case
    sub = topo.subset(keep)
    assert sub.compute_ids == tuple(sorted(keep))
    # nothing is invented: every link and node of the subset is in the original, unchanged
    assert set(sub.links) <= set(topo.links)
    assert set(sub.nodes) <= set(topo.nodes)
    # links among kept devices all survive
    for a in keep:
        for b in keep:
            assert sub.link(a, b) == topo.link(a, b)
    # no forwarding node is left as a dead end
    for node in sub.nodes:
        if not node.is_compute:
            assert len(set(sub.neighbors(node.id))) >= 2
    # subsetting again changes nothing but the name
    again = sub.subset(keep)
    assert (again.nodes, again.links) == (sub.nodes, sub.links)
