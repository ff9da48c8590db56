"""One entry point for every way a user names a topology: a preset or a file of any format.

``BLINKFLOW_TOPOLOGY``, ``blinkrun --topology`` and ``blinkrun plan/simulate --topology`` all
take the same string; this module turns it into a :class:`Topology`.
"""
from __future__ import annotations

import os

from ..errors import TopologyError
from .io import file_stem, read_file, topology_from_json
from .model import Topology
from .nccl_xml import topology_from_nccl_xml
from .nvidia_smi import topology_from_nvidia_smi
from .presets import get_preset


def resolve_topology(spec: str, where: str = "topology") -> Topology:
    """A preset name (``dgx1-v100``, ``cpu-host:8``, ``2xdgx1-v100``) or a file path.

    A path that exists is read and its format told from its content: blinkflow's JSON
    (``{``), NCCL's topology XML (``<``) or ``nvidia-smi topo -m`` text (a ``GPU0`` header).
    Anything else is looked up as a preset. Errors raise :class:`TopologyError` naming
    ``where`` (e.g. ``BLINKFLOW_TOPOLOGY``) or the file and line.

    >>> resolve_topology("cpu-host:2").compute_ids
    (0, 1)
    """
    text = (spec or "").strip()
    if not text:
        raise TopologyError("empty topology: name a preset or a file", where)
    if os.path.isfile(text):
        return load_any(text)
    try:
        return get_preset(text)
    except TopologyError as e:
        message = str(e)[len(e.where) + 2:] if e.where else str(e)
        if _looks_like_path(text):
            message = f"no file {text!r} (and no preset of that name)"
        raise TopologyError(message, where) from None


def load_any(path: str) -> Topology:
    """Read a topology file whose format is told by its content (see :func:`detect_format`)."""
    data, where = read_file(path)
    fmt = detect_format(data, where)
    if fmt == "nccl-xml":
        return topology_from_nccl_xml(data, where=where, name=file_stem(where))
    text = data.decode("utf-8", errors="replace")
    if fmt == "nvidia-smi":
        return topology_from_nvidia_smi(text, where=where, name=file_stem(where))
    return topology_from_json(text, where)


def detect_format(data: bytes, where: str) -> str:
    """``json``, ``nccl-xml`` or ``nvidia-smi`` from the first non-blank characters."""
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        return "json"
    if head.startswith(b"<"):
        return "nccl-xml"
    first_line = head.split(b"\n", 1)[0]
    if b"GPU0" in first_line:
        return "nvidia-smi"
    raise TopologyError("cannot tell the format: expected blinkflow topology JSON, NCCL topology XML "
                        "(NCCL_TOPO_DUMP_FILE) or the output of `nvidia-smi topo -m`", where)


def _looks_like_path(text: str) -> bool:
    return os.sep in text or text.endswith((".json", ".xml", ".txt"))
