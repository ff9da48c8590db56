"""The shared-memory mailbox's pure parts: which CPUs it runs on, and its ring sizes. (Its rings
run in tests/mpi/cpu_backend_script.py, ``run_mailbox_rings``, and under every cpu backend test.)"""
import platform
import types

import pytest

from blinkflow.backends.cpu.backend import CpuBackend
from blinkflow.backends.cpu.mailbox import HEADER_WORDS, SEGMENT_BUDGET, SLOT_WORDS, shared_memory_ordered, slots_for
from blinkflow.config import Config
from blinkflow.errors import BackendError


@pytest.mark.parametrize("machine, ordered", [("x86_64", True), ("AMD64", True), ("i686", False), ("aarch64", False),
                                              ("arm64", False), ("ppc64le", False), ("riscv64", False)])
def test_only_total_store_order_cpus_use_the_rings(machine, ordered):
    assert shared_memory_ordered(machine) is ordered


@pytest.mark.parametrize("local_size", [2, 4, 8, 64, 128, 512])
def test_ring_slots_keep_a_segment_within_budget(local_size):
    slots = slots_for(local_size)
    assert 16 <= slots <= 1024 and slots & (slots - 1) == 0
    assert slots == 16 or local_size * (HEADER_WORDS + slots * SLOT_WORDS) * 8 <= SEGMENT_BUDGET
    assert slots_for(2) == 1024


def test_shm_control_is_refused_where_stores_are_not_ordered(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    host = types.SimpleNamespace(layout=types.SimpleNamespace(local_size=2))
    with pytest.raises(BackendError, match="total store order.*auto or mpi"):
        CpuBackend._open_mailbox(host, Config(cpu_control="shm"))
    assert CpuBackend._open_mailbox(host, Config(cpu_control="auto")) is None  # MPI messages instead
    assert CpuBackend._open_mailbox(host, Config(cpu_control="mpi")) is None
