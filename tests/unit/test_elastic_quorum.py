"""The quorum rule of an elastic reset (blinkflow/elastic/quorum.py): after a loss only one group
of survivors may go on, so that a network cut never leaves two jobs training."""
import itertools

import pytest

from blinkflow.elastic import quorum

TWO_HOSTS = ("a", "a", "b", "b")


@pytest.mark.parametrize("survivors,goes_on", [
    ((0, 1), True),      # a tie, with rank 0: the launcher's first host goes on
    ((2, 3), False),     # a tie, without rank 0
    ((0, 1, 2), True),   # a majority
    ((3,), False),
])
def test_a_cut_between_hosts_lets_exactly_the_majority_or_rank_0s_half_go_on(survivors, goes_on):
    side = quorum.decide(survivors, 4, TWO_HOSTS)
    assert side.goes_on is goes_on


def test_ranks_lost_on_a_host_the_group_shares_are_dead_not_cut_off():
    # three of four ranks killed on one machine: the last one goes on, as before the rule
    side = quorum.decide([3], 4, ("m",) * 4)
    assert side.goes_on and side.dead == (0, 1, 2) and side.uncertain == ()
    # a rank killed on bfb while bfb is cut off from bfa: bfb's lone survivor is a minority
    side = quorum.decide([3], 4, TWO_HOSTS)
    assert not side.goes_on and side.dead == (2,) and side.uncertain == (0, 1)


@pytest.mark.parametrize("hosts", [TWO_HOSTS, ("a", "b", "c", "c", "d"), ("a", "a", "a", "b", "c", "c")])
def test_two_disjoint_groups_never_both_go_on(hosts):
    ranks = range(len(hosts))
    by_host = {}
    for r in ranks:
        by_host.setdefault(hosts[r], []).append(r)
    names = sorted(by_host)
    # every split of the hosts into two sides, each side keeping any non-empty subset of its ranks
    for k in range(1, len(names)):
        for left_hosts in itertools.combinations(names, k):
            left = [r for h in left_hosts for r in by_host[h]]
            right = [r for h in names if h not in left_hosts for r in by_host[h]]
            for a in _subsets(left):
                for b in _subsets(right):
                    both = quorum.decide(a, len(hosts), hosts).goes_on and quorum.decide(b, len(hosts), hosts).goes_on
                    assert not both, (a, b)


def _subsets(ranks):
    return [c for n in range(1, len(ranks) + 1) for c in itertools.combinations(ranks, n)]


def test_the_refusal_names_both_sides_and_says_what_to_do():
    side = quorum.decide((2, 3), 4, TWO_HOSTS)
    text = quorum.refusal(side, 4, TWO_HOSTS)
    assert "network partition" in text and "ranks 2, 3 (host b)" in text and "ranks 0, 1 (host a)" in text
    assert side.unreachable_hosts(TWO_HOSTS) == ("a",) and "Check the network" in text
