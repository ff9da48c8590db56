"""Tensor fusion: many small all-reduces become one collective on one buffer.

Every rank groups the same ordered list of responses the same way (the grouping is a pure
function of the responses and the threshold), so no extra message is needed to agree on it.
All-reduces fuse when they share dtype, reduce op, scale factors and device, up to
``threshold`` bytes per batch; a tensor larger than the threshold runs alone (the backend buffer
grows to fit it). Other collectives run one by one.
"""
from __future__ import annotations

from typing import List

import numpy as np

from .messages import Kind, Response


def _nbytes(response: Response) -> int:
    request = response.first()
    return int(np.prod(request.shape, dtype=np.int64)) * np.dtype(request.dtype).itemsize


def _fusion_key(response: Response):
    r = response.first()
    return (r.dtype, r.op, r.prescale, r.postscale, r.device)


def make_batches(responses: List[Response], threshold: int) -> List[List[Response]]:
    """Group ``responses`` into batches that each run as one collective.

    Batches keep the order of their first member; an all-reduce joins the earliest open batch of
    its key that still has room, so interleaved dtypes still fuse.
    """
    batches: List[List[Response]] = []
    open_batches = {}  # fusion key -> (batch, bytes so far)
    for response in responses:
        if response.kind is not Kind.ALLREDUCE:
            batches.append([response])
            continue
        key = _fusion_key(response)
        size = _nbytes(response)
        current = open_batches.get(key)
        if current is not None and current[1] + size <= threshold:
            current[0].append(response)
            open_batches[key] = (current[0], current[1] + size)
            continue
        batch = [response]
        batches.append(batch)
        if size < threshold:  # a tensor that fills the buffer alone leaves the open batch open
            open_batches[key] = (batch, size)
    return batches


def offsets(sizes: List[int]) -> List[int]:
    """Start of each tensor in the fused buffer (elements)."""
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += n
    return out
