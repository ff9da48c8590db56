"""Plans from measured links (blinkflow/topology/measured_links.py, runtime/link_probe.py's pure
parts, the planner on a measured mesh): the figures agreed, the mesh's fair shares, and a slow
pair of hosts carrying less in the three-phase plan while the plan stays verified and faster."""
import itertools
from fractions import Fraction

import pytest

from blinkflow.errors import TopologyError
from blinkflow.planner.loads import link_loads
from blinkflow.planner.multihost import three_phase
from blinkflow.planner.verify import verify_plan
from blinkflow.runtime.link_probe import _size_for, rounds, wanted
from blinkflow.config import Config
from blinkflow.topology.measured_links import LinkRates, agree, fair_shares, with_measured_links
from blinkflow.topology.merge import RankProbe, merge_probes
from blinkflow.topology.presets import get_preset
from plan_loads import host_pair_loads   # tests/ is on sys.path under pytest

HOSTS = ("h0", "h1", "h2")
FAST = 0.125   # GB/s: 1 Gbit/s


def cpu_job(hosts, per_host=1):
    probes = [RankProbe(r, h, h, r % per_host) for r, h in enumerate(h for h in hosts for _ in range(per_host))]
    return merge_probes(probes)


def rates_with_slow_pair(hosts=HOSTS, slow=("h0", "h1"), factor=4):
    return {(a, b): FAST / factor if {a, b} == set(slow) else FAST
            for a, b in itertools.permutations(hosts, 2)}


@pytest.mark.parametrize("count", range(1, 10))
def test_rounds_meet_every_pair_once_and_nobody_twice_in_a_round(count):
    got = rounds(count)
    met = [pair for pairs in got for pair in pairs]
    assert sorted(met) == sorted(itertools.combinations(range(count), 2))
    for pairs in got:
        players = [p for pair in pairs for p in pair]
        assert len(players) == len(set(players))
    assert len(got) == (count - 1 if count % 2 == 0 else count) or count == 1


def test_agreement_takes_each_directions_lowest_report():
    ends = [{("a", "b"): 1.0, ("b", "a"): 2.0}, {("a", "b"): 0.9, ("b", "a"): 20.0}]
    assert agree(ends) == {("a", "b"): 0.9, ("b", "a"): 2.0}
    # the same reports in any order give the same figures: every rank plans alike
    assert agree(reversed(ends)) == agree(ends)


def test_a_rank_that_measures_differently_cannot_speed_a_slow_pair_up():
    honest = rates_with_slow_pair()
    boastful = {pair: v * 10 for pair, v in honest.items()}   # one end's clock ran short
    agreed = agree([honest, boastful])
    assert agreed == honest
    topo = with_measured_links(cpu_job(HOSTS).topology, LinkRates.of(HOSTS, agreed))
    assert topo.capacity("h0/nic0", "h1/nic0") < topo.capacity("h0/nic0", "h2/nic0")


def test_missing_or_bad_figures_are_refused_with_the_pair_named():
    with pytest.raises(TopologyError, match="h1->h0"):
        LinkRates.of(("h0", "h1"), {("h0", "h1"): 1.0})
    with pytest.raises(TopologyError, match="finite and > 0"):
        LinkRates.of(("h0", "h1"), {("h0", "h1"): 1.0, ("h1", "h0"): float("nan")})


def test_equal_hosts_split_their_nic_evenly_like_the_switch():
    shares = fair_shares({pair: FAST for pair in itertools.permutations("abcd", 2)})
    assert set(shares.values()) == {Fraction(FAST).limit_denominator(1 << 20) / 3}


def test_one_slow_pair_among_three_hosts_gets_the_optimal_shares():
    shares = fair_shares(rates_with_slow_pair())
    r = Fraction(1, 8)
    # each host receives 3/4 of its NIC: 1/4 from the slow peer, 1/2 from the fast one
    assert shares[("h0", "h1")] == shares[("h1", "h0")] == r / 4
    assert shares[("h0", "h2")] == shares[("h2", "h0")] == shares[("h1", "h2")] == shares[("h2", "h1")] == r / 2
    for host in HOSTS:
        assert sum(v for (a, _), v in shares.items() if a == host) <= r
        assert sum(v for (_, b), v in shares.items() if b == host) <= r


def test_figures_within_the_same_rate_band_keep_the_nominal_topology():
    job = cpu_job(HOSTS)
    jitter = {pair: FAST * (0.9 + 0.02 * i) for i, pair in enumerate(itertools.permutations(HOSTS, 2))}
    assert with_measured_links(job.topology, LinkRates.of(HOSTS, jitter)) is job.topology


def test_a_slow_pair_carries_less_and_the_measured_plan_is_faster():
    job = cpu_job(HOSTS, per_host=2)
    devices = list(job.devices)
    measured = with_measured_links(job.topology, LinkRates.of(HOSTS, rates_with_slow_pair()))
    assert measured.name.endswith("+measured") and "net" not in {n.id for n in measured.nodes}
    plan = three_phase(measured, devices)
    verify_plan(plan, measured)
    loads = host_pair_loads(measured, link_loads(plan))
    slow = max(loads[("h0", "h1")], loads[("h1", "h0")])
    assert slow < 0.75 * min(v for pair, v in loads.items() if set(pair) != {"h0", "h1"}), loads
    # the nominal plan (a uniform star) rated on the measured mesh is slower
    nominal = three_phase(job.topology, devices)
    nominal_on_mesh = _rate_on(nominal, measured)
    assert plan.rate_gbps > 1.3 * nominal_on_mesh, (plan.rate_gbps, nominal_on_mesh)


def _rate_on(plan, mesh):
    """The rate of a plan made on the nominal star, on the mesh: its cross traffic between two
    hosts' NICs goes through the switch there; here it takes the pair's link."""
    loads = {}
    for (a, b), load in link_loads(plan).items():
        if b == "net" or a == "net":
            continue
        loads[(a, b)] = loads.get((a, b), 0.0) + load
    for group in plan.cross:
        for tree in group.plan.trees:
            for u, v in tree.edges:
                nu, nv = (f"{mesh.node(d).host}/nic0" for d in (u, v))
                w = (group.stop - group.start) * tree.fraction
                loads[(nu, nv)] = loads.get((nu, nv), 0.0) + w
                loads[(nv, nu)] = loads.get((nv, nu), 0.0) + w
    return 1 / max(load / mesh.capacity(a, b) for (a, b), load in loads.items())


def test_two_hosts_and_split_hosts_do_not_probe():
    assert wanted(Config(), ["a", "b", "c"])
    assert not wanted(Config(), ["a", "b", "a"])                   # two hosts: nothing to route around
    assert not wanted(Config(link_probe=0), ["a", "b", "c"])
    assert not wanted(Config(split_hosts=3), ["host0", "host1", "host2"])
    assert not wanted(Config(topology="cpu-host:3"), ["a", "b", "c"])


def test_hosts_with_several_nics_are_refused_and_the_job_keeps_the_nominal_plan():
    topo = get_preset("2xdgx1-v100")
    hosts = sorted(set(topo.hosts))
    third = {pair: FAST for pair in itertools.permutations(hosts, 2)}
    third[(hosts[0], hosts[1])] = FAST / 4
    with pytest.raises(TopologyError, match="several NICs"):
        with_measured_links(topo, LinkRates.of(hosts, third))


def test_the_timed_exchange_is_sized_for_the_rate():
    assert _size_for(125e6) == 2 << 20          # 1 Gbit/s: 30 ms is 3.75 MB
    assert _size_for(1e3) == 1 << 20           # never below 1 MiB
    assert _size_for(1e12) == 64 << 20         # never above 64 MiB


class _Rank0:
    def Get_rank(self):
        return 0


def test_a_job_of_several_nic_hosts_warns_and_plans_on_nominal_rates(monkeypatch, caplog):
    from blinkflow.runtime import link_probe

    topo = get_preset("3xdgx1-v100")
    hosts = list(dict.fromkeys(topo.node(d).host for d in topo.compute_ids))
    rates = LinkRates.of(hosts, rates_with_slow_pair(hosts, slow=hosts[:2]))
    monkeypatch.setattr(link_probe, "probe_links", lambda comm, ranks_hosts: rates)
    ranks_hosts = [topo.node(d).host for d in topo.compute_ids]
    with caplog.at_level("WARNING", logger="blinkflow"):
        got = link_probe.measured_topology(_Rank0(), Config(), topo, ranks_hosts)
    assert got is topo
    assert "several NICs" in caplog.text


def test_a_cpu_job_with_a_slow_pair_plans_on_the_mesh(monkeypatch):
    from blinkflow.runtime import link_probe

    job = cpu_job(HOSTS)
    monkeypatch.setattr(link_probe, "probe_links", lambda comm, hosts: LinkRates.of(HOSTS, rates_with_slow_pair()))
    got = link_probe.measured_topology(_Rank0(), Config(), job.topology, list(job.hosts))
    assert got.name == "3xcpu-host+measured"
    assert link_probe.measured_topology(_Rank0(), Config(link_probe=0), job.topology, list(job.hosts)) is job.topology
