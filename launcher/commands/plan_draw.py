"""``blinkrun plan --png``: the topology with each tree in its own colour and each link's load.

Devices sit on a circle in id order, forwarding nodes (switches, sockets, NICs) used by the
plan's routes inside it. Thin grey lines are the topology's links among the drawn nodes; each
tree's edges are arrows in the tree's colour (curved apart so parallel trees stay visible; an
edge through a switch is drawn along its route). Every loaded link is labelled with the GB/s it
carries at the plan's rate over its capacity, both directions, so a bottleneck reads at a glance.
matplotlib is imported here only, when a picture is asked for.
"""
from __future__ import annotations

import math
from typing import Dict, Hashable, Tuple

from ...planner.loads import edge_hops, link_loads


def _positions(plan, forwarding) -> Dict[Hashable, Tuple[float, float]]:
    pos = {}
    devices = sorted(plan.devices)
    for i, d in enumerate(devices):
        angle = math.pi / 2 - 2 * math.pi * i / len(devices)
        pos[d] = (math.cos(angle), math.sin(angle))
    fwd = sorted(forwarding, key=str)
    for i, n in enumerate(fwd):
        if len(fwd) == 1:
            pos[n] = (0.0, 0.0)
        else:
            angle = math.pi / 2 - 2 * math.pi * (i + 0.5) / len(fwd)
            pos[n] = (0.45 * math.cos(angle), 0.45 * math.sin(angle))
    return pos


def _short(node) -> str:
    """A node's name without its host prefix ("host0/nic0" -> "nic0"): the position says it."""
    return str(node).split("/")[-1]


def draw_plan(plan, topology, path: str) -> None:
    """Write a PNG of ``plan`` on ``topology`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    flat = [plan] if not plan.is_three_phase else list(plan.intra) + [g.plan for g in plan.cross]
    forwarding = {n for p in flat for r in p.routes for n in r.path[1:-1]}
    pos = _positions(plan, forwarding)
    fig, ax = plt.subplots(figsize=(9, 9))
    ax.set_aspect("equal")
    ax.axis("off")
    drawn = set(pos)
    for link in topology.links:  # the fabric, faint, under everything
        if link.src in drawn and link.dst in drawn and str(link.src) < str(link.dst):
            (x1, y1), (x2, y2) = pos[link.src], pos[link.dst]
            ax.plot([x1, x2], [y1, y2], color="#cccccc", lw=1, zorder=1)
    colours = plt.get_cmap("tab20" if sum(len(p.trees) for p in flat) > 10 else "tab10")
    legend = []
    index = 0
    for p in flat:
        for tree in p.trees:
            colour = colours(index % colours.N)
            rad = 0.08 + 0.035 * (index % 8)
            for a, b in tree.edges:
                for u, v in edge_hops(p, tree, a, b):
                    ax.add_patch(FancyArrowPatch(pos[u], pos[v], arrowstyle="-|>", mutation_scale=12,
                                                 connectionstyle=f"arc3,rad={rad}", color=colour, lw=1.6,
                                                 alpha=0.85, shrinkA=14, shrinkB=14, zorder=2))
            chan = f", {tree.channel}" if tree.channel != "main" else ""
            legend.append((colour, f"tree {index}: root {tree.root}, {tree.fraction:.3f}{chan}"))
            index += 1
    loads = link_loads(plan)
    labelled = set()
    for (a, b), load in sorted(loads.items(), key=lambda kv: str(kv[0])):
        key = frozenset((a, b))
        if key in labelled or a not in pos or b not in pos:
            continue
        labelled.add(key)
        back = loads.get((b, a), 0.0)
        cap = topology.capacity(a, b)
        (x1, y1), (x2, y2) = pos[a], pos[b]
        sa, sb = _short(a), _short(b)
        text = f"{sa}→{sb} {load * plan.rate_gbps:.1f}\n{sb}→{sa} {back * plan.rate_gbps:.1f}\n/ {cap:g} GB/s"
        ax.text(0.5 * (x1 + x2), 0.5 * (y1 + y2), text, fontsize=8, ha="center", va="center", zorder=4,
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="#999999", alpha=0.9))
    for n, (x, y) in pos.items():
        is_dev = isinstance(n, int)
        ax.scatter([x], [y], s=900 if is_dev else 500, marker="o" if is_dev else "s", zorder=3,
                   color="#1f3b73" if is_dev else "#777777")
        ax.text(x, y, _short(n), color="white", fontsize=11 if is_dev else 7,
                ha="center", va="center", zorder=5, weight="bold")
    for i, (colour, text) in enumerate(legend[:24]):
        ax.text(1.32, 1.15 - 0.085 * i, "■ " + text, color=colour, fontsize=8, ha="left", va="center")
    if len(legend) > 24:
        ax.text(1.32, 1.15 - 0.085 * 24, f"... {len(legend) - 24} more trees", fontsize=8)
    root = f" from {plan.root}" if plan.root is not None else ""
    ax.set_title(f"{plan.topology}: {plan.collective}{root} over {','.join(map(str, plan.devices))}\n"
                 f"{plan.rate_gbps:.2f} GB/s (optimal {plan.optimal_gbps:.2f}, ring {plan.ring_gbps:.2f}), "
                 f"{plan.algorithm}, {len(legend)} trees; labels: GB/s carried at that rate / capacity",
                 fontsize=10)
    ax.set_xlim(-1.25, 2.2)
    ax.set_ylim(-1.25, 1.3)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
