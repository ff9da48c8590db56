"""The OR-Tools max-flow adapter agrees with networkx and checks its input."""
from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blinkflow.errors import PlanError
from blinkflow.planner.maxflow import FlowGraph, integer_scale, max_flow_value, scaled, to_fraction

arcs_strategy = st.dictionaries(
    st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", 0, 1, 2, 3, 4])).filter(lambda a: a[0] != a[1]),
    st.integers(0, 50), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(arcs_strategy, st.integers(0, 6), st.sampled_from(["a", "b", 0, 1, 2, 3, 4]))
def test_max_flow_matches_networkx(arcs, source, sink):
    if source == sink:
        return
    g = nx.DiGraph()
    g.add_nodes_from([source, sink])
    for (u, v), c in arcs.items():
        g.add_edge(u, v, capacity=c)
    expected = nx.maximum_flow_value(g, source, sink)
    assert max_flow_value(arcs, source, sink) == expected


def test_min_cut_side_and_capacity_updates():
    graph = FlowGraph({("s", "m"): 3, ("m", "t"): 2, ("s", "t"): 1})
    value, side = graph.min_cut("s", "t")
    assert value == 3 and side == {"s", "m"}
    graph.set_capacity(("m", "t"), 10)
    assert graph.max_flow("s", "t") == 4


def test_integer_scale_is_exact():
    caps = {(0, 1): Fraction(25, 2), (1, 0): Fraction(10, 3), (1, 2): to_fraction(0.1)}
    s = integer_scale(caps.values())
    assert s == 30
    assert scaled(caps, s) == {(0, 1): 375, (1, 0): 100, (1, 2): 3}
    with pytest.raises(PlanError):
        scaled(caps, 2)


@pytest.mark.parametrize("bad", [-1, 2.5, 2 ** 60])
def test_bad_capacities_raise(bad):
    with pytest.raises(PlanError):
        FlowGraph({(0, 1): bad})


def test_same_source_and_sink_raises():
    with pytest.raises(PlanError):
        max_flow_value({(0, 1): 1}, 0, 0)
