"""The Plan: which spanning trees carry which fraction of a collective's buffer.

A plan is plain data with a JSON round-trip (``blinkrun plan --json`` prints :meth:`Plan.to_dict`),
so a hang can be replayed offline from a dump and every rank can hash its plan and compare.

Conventions (the JSON of ``blinkrun plan --json``, ``docs/planner.md``):

* ``trees[i].edges`` point in the broadcast / all-gather direction (parent -> child); reductions
  use them reversed. Tree ``i`` carries ``trees[i].fraction`` of the buffer; fractions sum to 1.
* For all-reduce every tree is used twice: its fraction is reduced up to the root, then
  broadcast back down. Blink's single-root plan has every root equal; the reduce-scatter +
  all-gather plan (ForestColl) has trees rooted at every device.
* An edge between devices with no direct link (through an NVSwitch, a PCIe switch or a
  network) has a :class:`Route`; it loads every physical link of that route.
* A multi-host all-reduce is a three-phase plan (Blink §5): ``intra`` holds one all-reduce plan
  per host (run as reduce-scatter, then later as all-gather over the same trees) and ``cross``
  the all-reduces among the devices that hold the same shard on every host.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from ..errors import PlanError

NodeId = Union[int, str]
T = TypeVar("T")
COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
PLAN_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Tree:
    """A spanning arborescence of the participating devices carrying ``fraction`` of the data."""

    root: int
    fraction: float
    edges: Tuple[Tuple[int, int], ...]
    channel: str = "main"
    """Which fabric the tree rides on ("main", or "pcie" for Blink's hybrid PCIe trees)."""

    def children(self) -> Dict[int, List[int]]:
        out: Dict[int, List[int]] = {}
        for parent, child in self.edges:
            out.setdefault(parent, []).append(child)
        return out

    def to_dict(self) -> dict:
        out = {"root": self.root, "fraction": self.fraction, "edges": [list(e) for e in self.edges]}
        if self.channel != "main":
            out["channel"] = self.channel
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Tree":
        return cls(root=d["root"], fraction=float(d["fraction"]),
                   edges=tuple((int(a), int(b)) for a, b in d["edges"]), channel=d.get("channel", "main"))


@dataclasses.dataclass(frozen=True)
class Route:
    """The physical path of a logical edge ``src -> dst`` (both endpoints included)."""

    src: int
    dst: int
    path: Tuple[NodeId, ...]
    channel: str = "main"
    """The channel of the trees that use this route (a hybrid plan may route one pair of
    devices directly over NVLink on "main" and through PCIe switches on "pcie")."""

    def hops(self) -> List[Tuple[NodeId, NodeId]]:
        return list(zip(self.path[:-1], self.path[1:]))

    def to_dict(self) -> dict:
        out = {"src": self.src, "dst": self.dst, "path": list(self.path)}
        if self.channel != "main":
            out["channel"] = self.channel
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Route":
        return cls(src=d["src"], dst=d["dst"], path=tuple(d["path"]), channel=d.get("channel", "main"))


@dataclasses.dataclass(frozen=True)
class CrossGroup:
    """Phase 2 of a three-phase all-reduce: the slice [start, stop) of the buffer (fractions of
    the whole) is held, after the intra-host reduce-scatter, by ``devices`` (one per host); they
    all-reduce it among themselves with ``plan``."""

    start: float
    stop: float
    devices: Tuple[int, ...]
    plan: "Plan"

    def to_dict(self) -> dict:
        return {"start": self.start, "stop": self.stop, "devices": list(self.devices), "plan": self.plan.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "CrossGroup":
        return cls(start=float(d["start"]), stop=float(d["stop"]), devices=tuple(d["devices"]),
                   plan=Plan.from_dict(d["plan"]))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A verified plan for one collective on one topology (or a subset of it)."""

    collective: str
    topology: str
    devices: Tuple[int, ...]
    """The participating compute devices in rank order (``gpus`` in the JSON)."""
    trees: Tuple[Tree, ...]
    rate_gbps: float
    optimal_gbps: float
    ring_gbps: float = 0.0
    root: Optional[int] = None
    algorithm: str = ""
    """How the trees were made: "edmonds", "forestcoll", "reduce-broadcast", "three-phase", ..."""
    routes: Tuple[Route, ...] = ()
    intra: Tuple["Plan", ...] = ()
    cross: Tuple[CrossGroup, ...] = ()
    plan_seconds: float = 0.0

    def __post_init__(self):
        if self.collective not in COLLECTIVES:
            raise PlanError(f"unknown collective {self.collective!r}; expected one of {', '.join(COLLECTIVES)}")

    @property
    def is_three_phase(self) -> bool:
        return bool(self.intra)

    def route(self, src: int, dst: int, channel: str = "main") -> Optional[Route]:
        """The route of edge ``src -> dst`` on ``channel``; None when the edge is a direct link."""
        return self._route_index.get((src, dst, channel))

    # A plan is immutable, so what is computed from it is computed once and kept on it: the route
    # index (a cross-host plan of 1,024 GPUs has ~450,000 routes) and whatever ``derived`` holds
    # (the link loads). None of it is data: not in the JSON, the digest, equality or pickles.
    @functools.cached_property
    def _route_index(self) -> Dict[Tuple[int, int, str], Route]:
        index: Dict[Tuple[int, int, str], Route] = {}
        for route in self.routes:
            index.setdefault((route.src, route.dst, route.channel), route)  # the first one counts
        return index

    @functools.cached_property
    def _derived(self) -> Dict[str, object]:
        return {}

    def derived(self, name: str, compute: Callable[["Plan"], T]) -> T:
        """``compute(self)``, computed on the first call for ``name`` and remembered."""
        if name not in self._derived:
            self._derived[name] = compute(self)
        return self._derived[name]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in _CACHES}

    def with_figures(self, **figures: float) -> "Plan":
        """The same trees with other reported figures (``rate_gbps``, ``optimal_gbps``,
        ``ring_gbps``, ``plan_seconds``); what was derived from the trees stays computed."""
        unknown = set(figures) - set(_FIGURES)
        if unknown:
            raise ValueError(f"with_figures changes only {', '.join(_FIGURES)}, not {', '.join(sorted(unknown))}")
        out = dataclasses.replace(self, **figures)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k in _CACHES})
        return out

    # ---- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON of ``blinkrun plan --json`` (``docs/planner.md``) plus the fields needed to rebuild it."""
        out = {
            "schema": PLAN_SCHEMA,
            "topology": self.topology,
            "gpus": list(self.devices),
            "collective": self.collective,
            "root": self.root,
            "rate_gbps": self.rate_gbps,
            "optimal_gbps": self.optimal_gbps,
            "ring_gbps": self.ring_gbps,
            "plan_seconds": self.plan_seconds,
            "algorithm": self.algorithm,
            "trees": [t.to_dict() for t in self.trees],
        }
        if self.routes:
            out["routes"] = [r.to_dict() for r in self.routes]
        if self.intra:
            out["intra"] = [p.to_dict() for p in self.intra]
            out["cross"] = [g.to_dict() for g in self.cross]
        return out

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        try:
            return cls(
                collective=d["collective"], topology=d["topology"], devices=tuple(d["gpus"]),
                trees=tuple(Tree.from_dict(t) for t in d["trees"]), rate_gbps=float(d["rate_gbps"]),
                optimal_gbps=float(d["optimal_gbps"]), ring_gbps=float(d.get("ring_gbps", 0.0)),
                root=d.get("root"), algorithm=d.get("algorithm", ""),
                routes=tuple(Route.from_dict(r) for r in d.get("routes", ())),
                intra=tuple(Plan.from_dict(p) for p in d.get("intra", ())),
                cross=tuple(CrossGroup.from_dict(g) for g in d.get("cross", ())),
                plan_seconds=float(d.get("plan_seconds", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"malformed plan JSON: {e!r}") from None

    def digest(self) -> str:
        """Stable hash of everything that changes what bytes move (not the planning time)."""
        d = self.to_dict()
        _strip_timing(d)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


_CACHES = ("_route_index", "_derived")
_FIGURES = ("rate_gbps", "optimal_gbps", "ring_gbps", "plan_seconds")


def _strip_timing(d: dict) -> None:
    d.pop("plan_seconds", None)
    for p in d.get("intra", ()):
        _strip_timing(p)
    for g in d.get("cross", ()):
        _strip_timing(g["plan"])


def split_counts(fractions: Sequence[float], total: int) -> List[int]:
    """Split ``total`` elements in proportion to ``fractions`` exactly (largest remainder).

    Deterministic, so every rank computes the same byte ranges from the same plan.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    s = float(sum(fractions))
    if not fractions or s <= 0:
        raise PlanError("fractions must be non-empty and sum to a positive number")
    ideal = [f / s * total for f in fractions]
    counts = [int(x) for x in ideal]
    short = total - sum(counts)
    order = sorted(range(len(ideal)), key=lambda i: (-(ideal[i] - counts[i]), i))
    for i in order[:short]:
        counts[i] += 1
    return counts
