"""Hosts are numbered one way everywhere: in order of first appearance (host 0 holds rank 0, or
the first device), and a rank's local rank is its place among its host's ranks (Layout's rule),
also for the hosts discovery names."""
import pytest

from blinkflow.backends.base import Layout
from blinkflow.runtime.discovery import host_indexes, host_of
from blinkflow.topology.merge import RankProbe, merge_probes
from blinkflow.topology.model import hosts_by_first_appearance


def test_hosts_in_order_of_first_appearance():
    assert hosts_by_first_appearance(["b", "a", "b", "c", "a"]) == ("b", "a", "c")
    assert hosts_by_first_appearance(iter([])) == ()
    assert host_indexes(["b", "a", "b", "c", "a"]) == [0, 1, 0, 2, 1]


def test_a_topology_and_a_merged_job_list_hosts_in_that_order():
    probes = [RankProbe(r, host, "box", 0) for r, host in enumerate(["y", "x", "y", "x"])]
    topology = merge_probes(probes).topology
    assert topology.hosts == ("y", "x")


@pytest.mark.parametrize("size, split", [(4, 2), (3, 2), (5, 3), (6, 6), (4, 1)])
def test_split_hosts_are_blocks_of_consecutive_ranks_with_layouts_local_ranks(size, split):
    hosts = [host_of(r, size, split, "machine") for r in range(size)]
    assert hosts == sorted(hosts, key=lambda h: int(h[4:])) and len(set(hosts)) == split
    layouts = [Layout(r, tuple(host_indexes(hosts)), ()) for r in range(size)]
    blocks = {h: [r for r in range(size) if hosts[r] == h] for h in hosts}
    assert [lay.local_rank for lay in layouts] == [blocks[hosts[r]].index(r) for r in range(size)]
    assert host_of(2, size, 0, "machine") == "machine"  # no split: the processor name
