"""What each pair of hosts carries in a plan made on measured links (a mesh of NIC-to-NIC
``net`` links: blinkflow/topology/measured_links.py), for the tests that check a slow pair
carries less (tests/unit/test_measured_links.py, tests/multihost/measured_links_script.py)."""
from typing import Dict, Mapping, Tuple

Pair = Tuple[str, str]


def host_pair_loads(topology, loads: Mapping[Tuple[object, object], float]) -> Dict[Pair, float]:
    """The load on each host pair's link, in buffers, from a plan's link loads
    (``blinkflow.planner.loads.link_loads``)."""
    out: Dict[Pair, float] = {}
    for (a, b), load in loads.items():
        link = topology.link(a, b)
        if link is not None and link.kind == "net":
            pair = (topology.node(a).host, topology.node(b).host)
            out[pair] = out.get(pair, 0.0) + load
    return out
