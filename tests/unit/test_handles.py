"""A handle owns its result: dropped unsynchronized it releases its table entry; int() of it hands
out a plain number that keeps the entry; only integers are handles."""
import gc
import pickle

import numpy as np
import pytest

from blinkflow.errors import InvalidArgumentError
from blinkflow.runtime.handles import Handle, HandleId, HandleTable, Slot


def _table_with_result():
    table, slot = HandleTable(), Slot()
    slot.set_result(np.ones(4))
    return table, table.add(Handle([slot], lambda results: results[0]))


def test_a_dropped_handle_releases_its_entry():
    table, handle = _table_with_result()
    assert isinstance(handle, HandleId) and len(table) == 1
    del handle
    gc.collect()
    assert len(table) == 0


def test_a_handle_caught_in_a_reference_cycle_is_released_by_the_collector():
    table, handle = _table_with_result()
    cycle = [handle]
    cycle.append(cycle)
    del handle, cycle
    gc.collect()
    assert len(table) == 0


def test_int_of_a_handle_keeps_the_entry_until_popped():
    table, handle = _table_with_result()
    number = int(handle)
    assert type(number) is int
    del handle
    gc.collect()
    assert np.array_equal(table.get(number).wait(lambda: None), np.ones(4))
    table.pop(number)
    assert len(table) == 0


def test_a_pickled_handle_is_a_plain_number():
    table, handle = _table_with_result()
    assert type(pickle.loads(pickle.dumps(handle))) is int
    assert len(table) == 1


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", None, [1]])
def test_only_integers_are_handles(bad):
    table, handle = _table_with_result()
    with pytest.raises(InvalidArgumentError, match="takes a handle"):
        table.get(bad)
    assert table.get(np.int64(int(handle))) is table.get(handle)
