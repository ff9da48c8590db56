"""``blinkrun plan``: pack the trees of one collective on a topology and show them.

    blinkrun plan --topology PRESET|FILE [--gpus LIST] --collective broadcast|allreduce|allgather|
                  reducescatter|reduce [--root R] [--json] [--png FILE] [--hybrid]

``--json`` prints the plan object of ``docs/planner.md``; otherwise a short table. ``--png`` draws the
topology with every tree in its own colour and every link's load. Bad input exits with status 2
and one line on stderr, never a traceback (launcher/one_line.py).
"""
from __future__ import annotations

import json

import click

from ..one_line import OneLineErrorCommand
from .topo import parse_gpus

COLLECTIVE_CHOICES = ("broadcast", "reduce", "allreduce", "allgather", "reducescatter")


def load_topology_spec(spec: str):
    """A preset name or a topology file of any format (``resolve_topology``)."""
    from ...topology.resolve import resolve_topology

    return resolve_topology(spec, "--topology")


@click.command(cls=OneLineErrorCommand, help="Plan one collective's spanning trees on a topology.")
@click.option("--topology", "topology_spec", required=True, metavar="PRESET|FILE",
              help="A preset (dgx1-v100, dgx2, cpu-host:4, 2xdgx1-v100, ...) or a topology file.")
@click.option("--gpus", metavar="LIST", help="Participating device ids in rank order, e.g. 0,1,4.")
@click.option("--collective", required=True, type=click.Choice(COLLECTIVE_CHOICES))
@click.option("--root", type=int, help="Root device of broadcast / reduce (default: the first).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (docs/planner.md).")
@click.option("--png", "png", type=click.Path(dir_okay=False), help="Draw the trees and link loads.")
@click.option("--hybrid", is_flag=True, help="Add PCIe trees as a second channel (Blink's hybrid).")
def command(topology_spec, gpus, collective, root, as_json, png, hybrid):
    from ...planner import make_plan

    # blinkflow's own errors (TopologyError, PlanError) become one line in OneLineErrorCommand.
    topology = load_topology_spec(topology_spec)
    devices = parse_gpus(gpus)
    if devices is not None:
        topology.subset(devices, "--gpus")  # names --gpus in the error for unknown devices
    plan = make_plan(topology, collective, devices, root=root, hybrid=hybrid, ring=True)
    if png:
        from .plan_draw import draw_plan
        try:
            draw_plan(plan, topology, png)
        except ImportError:  # matplotlib is the optional "plot" extra
            raise click.UsageError("--png needs matplotlib (pip install 'blinkflow[plot]')") from None
        except OSError as e:
            raise click.UsageError(f"cannot write {png}: {e.strerror}") from None
    if as_json:
        click.echo(json.dumps(plan_json(plan), indent=2))
        return
    click.echo(_summary(plan))


def plan_json(plan) -> dict:
    """:meth:`Plan.to_dict`; a three-phase plan also lists its phases as one-level ``trees`` and
    ``routes``, so every plan's trees carry the whole buffer at ``rate_gbps`` (``docs/planner.md``)."""
    out = plan.to_dict()
    if plan.is_three_phase:
        from ...planner.multihost import one_level_trees
        trees, routes = one_level_trees(plan)
        out["trees"] = [t.to_dict() for t in trees]
        out["routes"] = [r.to_dict() for r in routes]
    return out


def _summary(plan) -> str:
    lines = [
        f"topology {plan.topology}  devices {','.join(map(str, plan.devices))}  {plan.collective}"
        + (f" from {plan.root}" if plan.root is not None else ""),
        f"rate {plan.rate_gbps:.2f} GB/s  optimal {plan.optimal_gbps:.2f}  ring {plan.ring_gbps:.2f}  "
        f"({plan.algorithm}, {len(plan.trees)} trees, planned in {plan.plan_seconds * 1e3:.1f} ms)",
    ]
    for i, tree in enumerate(plan.trees):
        chan = f" [{tree.channel}]" if tree.channel != "main" else ""
        edges = " ".join(f"{a}->{b}" for a, b in tree.edges)
        lines.append(f"  tree {i:2d} root {tree.root} fraction {tree.fraction:.4f}{chan}: {edges}")
    if plan.is_three_phase:
        lines.append(f"  three phases: {len(plan.intra)} intra-host plans, {len(plan.cross)} cross-host groups")
        for g in plan.cross:
            lines.append(f"  slice [{g.start:.4f}, {g.stop:.4f}) devices {','.join(map(str, g.devices))} "
                         f"{g.plan.rate_gbps:.2f} GB/s")
    return "\n".join(lines)
