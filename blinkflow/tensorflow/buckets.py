"""Gradient buckets: which gradients travel together, in the order backprop produces them.

PyTorch DDP (Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 2020, §3.2.3) puts parameters into buckets of about ``bucket_cap_mb`` in the
*reverse* order of ``model.parameters()``: backprop differentiates the last layer first, so the
first bucket is complete early and its all-reduce runs while earlier layers are still being
differentiated; one wait before the optimizer step collects them all. Horovod reaches the same
overlap with one asynchronous op per gradient, which its background thread fuses. blinkflow
plans DDP's buckets when the step is traced, from the gradients' static sizes, so every rank
forms the same buckets and names them alike.

A bucket is closed once it holds at least ``cap`` bytes (a gradient larger than ``cap`` is a
bucket of its own); ``cap = 0`` puts every dense gradient of a kind in one bucket (no overlap).
Gradients of different kinds (dtypes) fill buckets of their own, as in DDP, so that a bucket's
results can cross back as one flat array. Sparse gradients (``IndexedSlices``, gathered rather
than reduced) travel alone, in their place. This module is pure: it sees sizes, never tensors.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence


class Item(NamedTuple):
    """One gradient, as the planner sees it."""

    index: int
    """Its position in the list of gradients."""
    nbytes: Optional[int]
    """Bytes it sends (after compression); None when its shape is not static."""
    sparse: bool = False
    kind: str = ""
    """Gradients of one kind (dtype) share buckets."""


class Unit(NamedTuple):
    """What one submission carries: a bucket of dense gradients, or one sparse gradient."""

    indices: List[int]
    sparse: bool = False


def plan(items_in_production_order: Sequence[Item], cap: int) -> List[Unit]:
    """Units in the order they become complete during backprop.

    ``items_in_production_order`` lists the gradients as backprop produces them (for a model,
    the reverse of its variables' order). A dense bucket is complete when its last gradient is;
    a sparse gradient is a unit the moment it is produced, ahead of the dense buckets still
    filling around it. Buckets left open at the end complete in the order of their last
    gradients.
    """
    if cap < 0:
        raise ValueError(f"bucket cap must be >= 0 bytes, got {cap}")
    units: List[Unit] = []
    filling: Dict[str, List] = {}  # kind -> [indices, bytes, position of the last gradient]
    for position, item in enumerate(items_in_production_order):
        if item.sparse:
            units.append(Unit([item.index], sparse=True))
            continue
        bucket = filling.setdefault(item.kind, [[], 0, 0])
        bucket[0].append(item.index)
        bucket[1] = cap if item.nbytes is None else bucket[1] + item.nbytes  # unknown size: close here
        bucket[2] = position
        if cap and bucket[1] >= cap:
            units.append(Unit(bucket[0]))
            del filling[item.kind]
    for indices, _, _ in sorted(filling.values(), key=lambda b: b[2]):
        units.append(Unit(indices))
    return units
