"""The job's plans: made once per (collective, root), agreed by every rank before they first run.

Every rank plans from the same topology with the same pure, deterministic planner, then the ranks
compare (topology digest, plan digest) in one collective. Ranks that would run different
schedules (a topology file that differs, a planner of another version on one host) fail there,
on every rank and naming the ranks, instead of deadlocking in the first collective; so does a
rank whose planning failed (its error travels instead of its digest).

The all-reduce plan, which every training job runs, is agreed at init; the others (all-gather,
reduce-scatter, a broadcast from each root) when they first run. That is collective too:
backends run collectives in the same order on every rank, so every rank asks for the same new
plan at the same call, and a disagreement fails that call on every rank. Init stays bounded by
one plan's cost at any scale (at 128 DGX-1 hosts the all-reduce plans in about a second, an
all-gather, 7 million tree edges, in four).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import PlanError

Key = Tuple[str, Optional[int]]


def init_keys(devices: Sequence[int]) -> List[Key]:
    """The plans agreed at init."""
    return [("allreduce", None)]


class PlanBook:
    """``book.get(collective, root=None)``: the agreed plan (``root`` is a device id)."""

    def __init__(self, comm, topology, devices: Sequence[int], make: Optional[Callable[..., Any]] = None):
        if make is None:
            from ..planner import make_plan as make
        self.comm = comm
        self.topology = topology
        self.devices = list(devices)
        self.make = make
        self._plans: Dict[Key, Any] = {}

    def get(self, collective: str, root: Optional[int] = None):
        key = (collective, root)
        plan = self._plans.get(key)
        if plan is None:
            self.agree([key])
            plan = self._plans[key]
        return plan

    __call__ = get

    def agree(self, keys: Sequence[Key]) -> None:
        """Plan ``keys`` here and compare with every rank (collective over ``comm``)."""
        made, mine = {}, []
        for key in keys:
            try:
                plan = made[key] = self.make(self.topology, key[0], devices=self.devices, root=key[1])
                mine.append(plan.digest())
            except Exception as e:  # noqa: BLE001 - every rank must hear of it, or the others hang
                mine.append(f"failed: {type(e).__name__}: {e}")
        every = self.comm.allgather((self.topology.digest(), tuple(mine)))
        _check(keys, every)
        self._plans.update(made)


def _label(key: Key) -> str:
    return key[0] if key[1] is None else f"{key[0]} from device {key[1]}"


def _check(keys: Sequence[Key], every: List[Tuple[str, Tuple[str, ...]]]) -> None:
    failed = [(r, _label(key), d[len("failed: "):]) for r, (_, digests) in enumerate(every)
              for key, d in zip(keys, digests) if d.startswith("failed: ")]
    if failed:
        raise PlanError("planning failed on " + "; ".join(f"rank {r} ({what}): {why}" for r, what, why in failed))
    if len(set(every)) == 1:
        return
    groups: Dict[Tuple, List[int]] = {}
    for r, answer in enumerate(every):
        groups.setdefault(answer, []).append(r)
    differ = [_label(key) for i, key in enumerate(keys) if len({digests[i] for _, digests in every}) > 1]
    topologies = len({topology for topology, _ in every}) > 1
    described = "; ".join(f"ranks {ranks}: topology {topology}" + (f", plans {', '.join(digests)}" if not topologies else "")
                          for (topology, digests), ranks in groups.items())
    what = "topologies" if topologies else f"plans for {', '.join(differ)}"
    raise PlanError(f"ranks computed different {what} ({described}). Every rank must see the same topology "
                    "and run the same blinkflow: set BLINKFLOW_TOPOLOGY to the same preset or file on every "
                    "rank, and install one version everywhere.")
