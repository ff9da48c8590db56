"""A collective that crosses in two halves: *submit* hands its arrays to the runtime and returns a
handle at once; one *wait* takes the handles and returns every result.

A submission's error must not be raised where it happened (inside a graph op that only returns a
handle, the other buckets' handles would never be waited for, and their names would stay in
flight): :func:`start` keeps it under a negative handle, and :func:`collector`'s wait raises the
first error of any handle only after synchronizing all the others.
"""
from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Sequence

from ...errors import BlinkflowError

_deferred: Dict[int, BlinkflowError] = {}
"""Errors of submissions, under the negative handles that a wait raises them from."""
_deferred_ids = itertools.count(-1, -1)


def start(fn: Callable[[list], int], arrays_of: Callable[[], list]) -> int:
    """``fn(arrays_of())``: a runtime handle, or a negative one standing for the error it raised."""
    try:
        return int(fn(arrays_of()))
    except BlinkflowError as error:
        key = next(_deferred_ids)
        _deferred[key] = error
        return key


def collector(finishers: Sequence[Callable[[int], Sequence]]) -> Callable[[List[int]], list]:
    """A function of the handles (ints) that synchronizes each in order (``finishers[i](handle)``
    returns the arrays of handle i) and returns all their results as one flat list; the first
    error of any handle is raised after every handle was synchronized."""
    finishers = list(finishers)

    def collect(ids: List[int]) -> list:
        outs, first_error = [], None
        for finish, handle in zip(finishers, ids):
            if handle < 0:  # the submission itself failed
                first_error = first_error or _deferred.pop(handle)
                continue
            try:
                outs.extend(finish(handle))
            except BlinkflowError as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return outs

    return collect
