"""Plans from measured links on three hosts (a bridge) whose first pair runs at a quarter of the
others' rate: the job measures the pairs at start-up, every rank plans on the same agreed
figures (even when one rank's measurements claim every pair ten times faster: no figure exceeds
its pair's cap), the slow pair carries less of the all-reduce than the best-measured pair, and
the results are right. (That the slow pair carries less than every other pair, on exact
figures, is tests/unit/test_measured_links.py's.)"""
import json
import os
import re
import sys

import pytest

from blinkflow.topology.measured_links import SAME_RATE
from harness import with_tests_on_path

HERE = os.path.dirname(os.path.abspath(__file__))
RATE = 200e6
SLOW = RATE / 4


@pytest.fixture(scope="module")
def slow_pair(three_hosts):
    """The three hosts, every one capped at RATE and the first pair at a quarter of it."""
    a, b, _ = three_hosts.hosts
    three_hosts.limit_pairs(RATE, {(a, b): SLOW, (b, a): SLOW})
    return three_hosts


@pytest.mark.mpi
@pytest.mark.parametrize("boasting", [None, 0, 1], ids=["honest", "rank0-boasts", "rank1-boasts"])
def test_the_slow_pair_carries_less_on_every_rank_alike(slow_pair, boasting):
    env = with_tests_on_path({"BLINKFLOW_LOG_LEVEL": "info"})
    if boasting is not None:
        env["BOASTING_RANK"] = str(boasting)
    proc = slow_pair.mpirun(3, [sys.executable, os.path.join(HERE, "measured_links_script.py")],
                              hosts="bfa:1,bfb:1,bfc:1", env=env, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    plans = [json.loads(line.split("PLAN ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("PLAN ")]
    assert sorted(p["rank"] for p in plans) == [0, 1, 2], out[-4000:]
    assert len({p["digest"] for p in plans}) == 1, plans     # one agreed topology, so one plan
    plan = plans[0]
    assert plan["name"].endswith("+measured") and plan["three_phase"], plan
    links, loads = plan["links"], plan["loads"]
    slow_pair = ("bfa->bfb", "bfb->bfa")
    # A figure can only err slow (each end times a transfer so that it cannot end early), so no
    # link of the mesh is above its pair's cap, give or take htb's burst: a boaster's figures
    # (ten times the truth) winning the agreement would put the slow pair far above it. Under
    # load (CI) TCP slows every pair and the fast ones may read lower than their cap, so the
    # check is the cap, not the ratio to the other pairs.
    for pair, gbps in links.items():
        cap = (SLOW if pair in slow_pair else RATE) / 8e9
        assert gbps <= 1.3 * cap, (pair, links)
    assert sorted(re.findall(r"VALUES OK (\d)", proc.stdout)) == ["0", "1", "2"], out[-4000:]
    assert "measured links, GB/s" in proc.stderr and "pairs differ" in proc.stderr, out[-4000:]
    # The plan puts less on the slow pair than on the best-measured pair, where the probe saw the
    # slow pair as the slow one. Starved of CPU (other jobs on a 2-core machine), it has read the
    # 200 Mbit/s pairs as slow as the 50 Mbit/s one (0.006-0.007 GB/s, one pair 0.015): then the
    # figures leave nothing to route around, and the fair plan on them is right.
    figures = f"measured GB/s {json.dumps(links, sort_keys=True)}; loads {json.dumps(loads, sort_keys=True)}"
    # Whatever the figures, the plan never puts more on the pair measured slowest than on the
    # pair measured fastest.
    slowest, fastest = min(links, key=links.get), max(links, key=links.get)
    assert loads[slowest] <= loads[fastest], figures
    others = [gbps for pair, gbps in links.items() if pair not in slow_pair]
    if max(links[p] for p in slow_pair) >= SAME_RATE * min(others):
        pytest.skip(f"the probe, under load, read the slow pair about as fast as others: {figures}")
    best = max(links, key=links.get)
    assert best not in slow_pair and max(loads[p] for p in slow_pair) < loads[best], figures


@pytest.mark.mpi
def test_blinkrun_topo_probe_prints_the_slow_pair(slow_pair):
    proc = slow_pair.run_on(slow_pair.hosts[0], [sys.executable, "-m", "blinkflow.launcher", "topo", "--probe",
                                                     "-H", "bfa,bfb,bfc"], env=slow_pair.env(), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # blinkrun tags each line with its rank ("[0]<stdout>: ")
    lines = [re.sub(r"^\[\d+\]<stdout>: ", "", line) for line in proc.stdout.splitlines()]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.split() and line.split()[0] in ("bfa", "bfb", "bfc")}
    assert rows["bfa"][0] == "-" and rows["bfb"][1] == "-", proc.stdout
    a_to_b, a_to_c = float(rows["bfa"][1]), float(rows["bfa"][2])
    assert a_to_b < a_to_c, proc.stdout     # a quarter on a quiet machine; closer under load
    assert "pairs differ: plans of jobs on these hosts route by these figures" in proc.stdout, proc.stdout
