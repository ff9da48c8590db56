"""Hand-made plans for schedule tests: spanning trees of any shape over any device set, so the
lowering and the checker are tested independently of the planner."""
import itertools
import random

from blinkflow.planner import CrossGroup, Plan, Tree


def bfs_tree(devices, root, rng=None):
    """A random spanning arborescence of ``devices`` rooted at ``root`` (random parent among the
    nodes already in the tree, so depths and fan-outs vary)."""
    rng = rng or random.Random(0)
    rest = [d for d in devices if d != root]
    rng.shuffle(rest)
    inside, edges = [root], []
    for d in rest:
        edges.append((rng.choice(inside), d))
        inside.append(d)
    return tuple(edges)


def chain(devices):
    return tuple(zip(devices[:-1], devices[1:]))


def trees_plan(collective, devices, roots, rng=None, ntrees_per_root=2, root=None):
    rng = rng or random.Random(0)
    trees = []
    for r in roots:
        for _ in range(ntrees_per_root):
            trees.append(Tree(r, rng.uniform(0.5, 2.0), bfs_tree(devices, r, rng)))
    total = sum(t.fraction for t in trees)
    trees = tuple(Tree(t.root, t.fraction / total, t.edges) for t in trees)
    return Plan(collective, "test", tuple(devices), trees, 1.0, 1.0, root=root)


def plan_for(collective, devices, rng=None, root=None):
    """A valid plan of ``collective``: trees rooted at ``root`` for broadcast/reduce, at every
    device for all-gather/reduce-scatter, at a random mix for all-reduce."""
    rng = rng or random.Random(0)
    devices = list(devices)
    if collective in ("broadcast", "reduce"):
        root = devices[0] if root is None else root
        return trees_plan(collective, devices, [root], rng, ntrees_per_root=rng.randint(1, 3), root=root)
    if collective in ("allgather", "reducescatter"):
        return trees_plan(collective, devices, devices, rng, ntrees_per_root=rng.randint(1, 2))
    roots = rng.sample(devices, rng.randint(1, len(devices)))
    return trees_plan(collective, devices, roots, rng, ntrees_per_root=rng.randint(1, 2))


def three_phase_plan(hosts, rng=None):
    """A three-phase all-reduce over ``hosts`` (lists of devices, same length each): intra
    plans with one tree rooted at each local rank, cross groups over the same local rank."""
    rng = rng or random.Random(0)
    per = len(hosts[0])
    intra = []
    for devs in hosts:
        trees = tuple(Tree(r, 1.0 / per, bfs_tree(devs, r, rng)) for r in devs)
        intra.append(Plan("allreduce", "test", tuple(devs), trees, 1.0, 1.0))
    cross = []
    for i in range(per):
        devs = tuple(h[i] for h in hosts)
        trees = (Tree(devs[0], 0.5, chain(devs)), Tree(devs[-1], 0.5, chain(devs[::-1])))
        cross.append(CrossGroup(i / per, (i + 1) / per, devs, Plan("allreduce", "test", devs, trees, 1.0, 1.0)))
    alldevs = tuple(itertools.chain(*hosts))
    return Plan("allreduce", "test", alldevs, (), 1.0, 1.0, algorithm="three-phase",
                intra=tuple(intra), cross=tuple(cross))
