"""The single-copy loop's chunk follows the core's L2: three chunk-sized arrays stay in it."""
import pytest

from blinkflow.backends.cpu import single_copy
from blinkflow.schedule import policy


@pytest.mark.parametrize("l2,chunk", [
    (2 << 20, 512 << 10),   # Xeon (Sapphire Rapids): three 1 MiB chunks would spill
    (1 << 20, 256 << 10),   # Zen 4
    (4 << 20, 1 << 20),     # large L2: the upper bound
    (256 << 10, 256 << 10),  # tiny L2: the lower bound
    (None, 1 << 20),        # unknown: the upper bound
])
def test_chunk_fits_three_times_in_l2(l2, chunk):
    assert policy.single_copy_chunk_bytes(l2) == chunk


def _cache(root, entries):
    for name, (level, kind, size) in entries.items():
        d = root / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")


def test_l2_is_read_from_sysfs(tmp_path):
    _cache(tmp_path, {"index0": (1, "Data", "48K"), "index1": (1, "Instruction", "32K"),
                      "index2": (2, "Unified", "2048K"), "index3": (3, "Unified", "307200K")})
    assert single_copy.l2_bytes(str(tmp_path)) == 2 << 20


def test_l2_in_megabytes_and_a_data_only_l2(tmp_path):
    _cache(tmp_path, {"index0": (1, "Data", "32K"), "index2": (2, "Data", "1M")})
    assert single_copy.l2_bytes(str(tmp_path)) == 1 << 20


@pytest.mark.parametrize("entries", [{}, {"index0": (1, "Data", "48K")}, {"index2": (2, "Unified", "lots")}])
def test_no_readable_l2_means_none(tmp_path, entries):
    _cache(tmp_path, entries)
    assert single_copy.l2_bytes(str(tmp_path)) is None
    assert single_copy.l2_bytes(str(tmp_path / "missing")) is None
