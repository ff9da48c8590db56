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
bucket of its own); ``cap = 0`` puts every dense gradient in one bucket (no overlap). Sparse
gradients (``IndexedSlices``, gathered rather than reduced) travel alone, in their place.
This module is pure: it sees sizes, never tensors.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence


class Item(NamedTuple):
    """One gradient, as the planner sees it."""

    index: int
    """Its position in the list of gradients."""
    nbytes: Optional[int]
    """Bytes it sends (after compression); None when its shape is not static."""
    sparse: bool = False


class Unit(NamedTuple):
    """What one submission carries: a bucket of dense gradients, or one sparse gradient."""

    indices: List[int]
    sparse: bool = False


def plan(items_in_production_order: Sequence[Item], cap: int) -> List[Unit]:
    """Units in the order they become complete during backprop.

    ``items_in_production_order`` lists the gradients as backprop produces them (for a model,
    the reverse of its variables' order). A dense bucket is complete when its last gradient is;
    a sparse gradient is a unit the moment it is produced, ahead of the dense bucket still
    filling around it.
    """
    if cap < 0:
        raise ValueError(f"bucket cap must be >= 0 bytes, got {cap}")
    units: List[Unit] = []
    bucket: List[int] = []
    filled = 0
    for item in items_in_production_order:
        if item.sparse:
            units.append(Unit([item.index], sparse=True))
            continue
        bucket.append(item.index)
        if item.nbytes is None:
            filled = cap  # a shape known only at run time: close the bucket here
        else:
            filled += item.nbytes
        if cap and filled >= cap:
            units.append(Unit(bucket))
            bucket, filled = [], 0
    if bucket:
        units.append(Unit(bucket))
    return units
