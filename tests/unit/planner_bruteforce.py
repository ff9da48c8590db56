"""Independent brute-force bounds for the planner tests: enumerate every cut (or partition).

Written from the definitions alone (DESIGN §4), sharing no code with ``blinkflow.planner``,
so a planner bug cannot hide behind a matching bug in its own bound:

* broadcast from r: min over node sets S ∋ r missing a device of c(δ⁺(S))  (Edmonds 1973);
* all-gather: N · min over node sets S with a device inside and one outside of
  c(δ⁺(S)) / |S ∩ devices|  (ForestColl);
* all-reduce under the §3.2 load model (both directions of a link carry a tree's share):
  min over partitions P of the devices of Σ_{pairs across P} min(c(a,b), c(b,a)) / (|P| − 1)
  (Nash-Williams 1961, Tutte 1961), for graphs without switches.
"""
from fractions import Fraction
from itertools import combinations


def graph_of(topology, devices):
    """The fabric the planner should use, rebuilt here: NVLink/NVSwitch/shm among the devices
    when that connects them, otherwise PCIe + QPI (with the switches and sockets)."""
    devs = set(devices)

    def arcs(kinds):
        keep = {n.id for n in topology.nodes if n.id in devs or not n.is_compute}
        out = {(l.src, l.dst): Fraction(repr(l.gbps)) for l in topology.links
               if l.kind in kinds and l.src in keep and l.dst in keep}
        while True:  # prune forwarding nodes that lead nowhere
            nbrs = {}
            for a, b in out:
                nbrs.setdefault(a, set()).add(b)
                nbrs.setdefault(b, set()).add(a)
            dead = {n for n, s in nbrs.items() if n not in devs and len(s) <= 1}
            if not dead:
                return out
            out = {k: v for k, v in out.items() if k[0] not in dead and k[1] not in dead}

    primary = arcs(("nvlink", "nvswitch", "shm"))
    if primary and _connected(primary, devices):
        return primary
    return arcs(("pcie", "qpi"))


def _connected(arcs, devices):
    for start in devices[:1]:
        for direction in (0, 1):
            seen, stack = {start}, [start]
            while stack:
                x = stack.pop()
                for a in arcs:
                    if a[direction] == x and a[1 - direction] not in seen:
                        seen.add(a[1 - direction])
                        stack.append(a[1 - direction])
            if not set(devices) <= seen:
                return False
    return True


def _nodes(arcs, devices):
    return sorted(set(devices) | {x for a in arcs for x in a}, key=str)


def _out(arcs, inside):
    return sum((c for (a, b), c in arcs.items() if a in inside and b not in inside), Fraction(0))


def _subsets(items):
    for k in range(len(items) + 1):
        yield from combinations(items, k)


def broadcast_bound(arcs, devices, root):
    others = [n for n in _nodes(arcs, devices) if n != root]
    best = None
    for extra in _subsets(others):
        s = {root, *extra}
        if set(devices) <= s:
            continue
        value = _out(arcs, s)
        best = value if best is None else min(best, value)
    return best


def allgather_bound(arcs, devices):
    nodes = _nodes(arcs, devices)
    best = None
    for s in _subsets(nodes):
        s = set(s)
        inside = len(s & set(devices))
        if inside == 0 or set(devices) <= s:
            continue
        ratio = _out(arcs, s) / inside
        best = ratio if best is None else min(best, ratio)
    return best * len(devices)


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def allreduce_bound(arcs, devices):
    """Nash-Williams–Tutte over the undirected pair capacities (graphs without switches)."""
    pair = {}
    for (a, b), c in arcs.items():
        if (b, a) in arcs:
            pair[frozenset((a, b))] = min(c, arcs[(b, a)])
    best = None
    for part in _partitions(list(devices)):
        if len(part) < 2:
            continue
        where = {d: i for i, block in enumerate(part) for d in block}
        cross = sum((c for p, c in pair.items() if len({where[x] for x in p}) == 2), Fraction(0))
        value = cross / (len(part) - 1)
        best = value if best is None else min(best, value)
    return best
