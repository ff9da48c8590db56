"""A piecewise-constant map over ``[0, n)``: the element ranges of one device's buffer.

Both the schedule builder (which step last wrote / read each range, to derive ``deps``) and the
symbolic checker (what each range holds) need to ask "what covers [lo, hi)?" and to overwrite
part of it. Ranges in a schedule are a few thousand chunk boundaries at most, so a sorted list of
segment starts with ``bisect`` is simpler and fast enough; no tree structure is needed.
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, Iterator, List, Tuple


class IntervalMap:
    """Segments ``[starts[i], starts[i+1])`` (the last one ends at ``n``), each with a value."""

    __slots__ = ("n", "starts", "values")

    def __init__(self, n: int, value: Any = None):
        self.n = n
        self.starts: List[int] = [0]
        self.values: List[Any] = [value]

    def _split(self, pos: int) -> int:
        """Make ``pos`` a segment start (when inside the map) and return its segment index."""
        if pos >= self.n:
            return len(self.starts)
        i = bisect.bisect_right(self.starts, pos) - 1
        if self.starts[i] == pos:
            return i
        self.starts.insert(i + 1, pos)
        self.values.insert(i + 1, self.values[i])
        return i + 1

    def span(self, lo: int, hi: int) -> range:
        """Segment indexes exactly covering ``[lo, hi)`` (splitting segments at both ends)."""
        if hi <= lo:
            return range(0)
        first = self._split(lo)
        last = self._split(hi)
        return range(first, last)

    def segment(self, i: int) -> Tuple[int, int]:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else self.n
        return self.starts[i], end

    def items(self, lo: int, hi: int) -> Iterator[Tuple[int, int, Any]]:
        """``(start, stop, value)`` for every segment inside ``[lo, hi)``."""
        for i in self.span(lo, hi):
            a, b = self.segment(i)
            yield a, b, self.values[i]

    def assign(self, lo: int, hi: int, value: Any) -> None:
        """Set ``[lo, hi)`` to one value (merging it into a single segment)."""
        idx = self.span(lo, hi)
        if not idx:
            return
        del self.starts[idx.start + 1:idx.stop]
        del self.values[idx.start + 1:idx.stop]
        self.values[idx.start] = value

    def update(self, lo: int, hi: int, fn: Callable[[Any], Any]) -> None:
        """Replace every value inside ``[lo, hi)`` with ``fn(value)``."""
        for i in self.span(lo, hi):
            self.values[i] = fn(self.values[i])
