"""Parse the text of ``nvidia-smi topo -m`` into a :class:`Topology` (parsing only; running
``nvidia-smi`` lives in :mod:`blinkflow.topology.probe`, so parsing is tested on captured text).

The format (NVIDIA's ``nvidia-smi`` documentation, ``topo -m``; captures in
``tests/fixtures/nvidia-smi-topo-*.txt``): a header row of columns — ``GPU0 .. GPUn``, then NIC
columns (``mlx5_0``, or ``NIC0`` with a ``NIC Legend`` naming them), then ``CPU Affinity``,
``NUMA Affinity`` and on recent drivers ``GPU NUMA ID`` — one row per GPU and, on recent drivers,
per NIC; cells are tab separated; a blank line and the Legend follow. A cell says how two
devices connect:

* ``X`` — the device itself;
* ``NV#`` — a bonded set of # NVLinks (this hides the PCIe path between the two GPUs);
* ``PIX`` / ``PXB`` — through one / several PCIe bridges, without the host bridge: the two
  devices share a PCIe switch;
* ``PHB`` / ``NODE`` — through the CPU's host bridge(s) of one NUMA node: same socket;
* ``SYS`` (``SOC`` on old drivers) — across the SMP interconnect (QPI/UPI): other socket.

How the graph is rebuilt from those relations:

* NVLink: ``NV#`` gives ``#`` links of ``nvlink_gbps`` each per direction (25 GB/s for
  NVLink2-4, pass 20 for P100's NVLink1; presets.py cites the white papers).
* NVSwitch: when every GPU pair shows the same ``NV#`` and a GPU would need more than
  :data:`MAX_NVLINKS_PER_GPU` physical links for that to be point-to-point (DGX-2 ``NV6`` × 15
  peers, DGX A100 ``NV12`` × 7, HGX H100 ``NV18`` × 7), the fabric is a switch: one node of kind
  ``switch``/``nvswitch`` with ``#`` links per GPU. A 4-GPU ``NV4`` full mesh (HGX A100 4-GPU)
  stays point-to-point. ``nvswitch=True/False`` overrides the guess.
* PCIe: devices related by PIX/PXB share one PCIe switch node (``pcie0`` ..); devices related by
  PHB/NODE, or with the same NUMA (else CPU) affinity, share a socket node (``cpu0`` ..), and so
  do groups that no SYS cell or differing affinity keeps apart (``NV#`` hides the PCIe path);
  sockets are joined pairwise by ``qpi`` links. A device alone behind its socket links to it
  directly. PCIe links get ``pcie_gbps`` (Gen3 x16 12 GB/s, NCCL's figure).
* A NIC that is SYS to everything and has no row of its own (the storage NICs of a DGX A100)
  cannot be placed on any socket from this text; it is left out rather than guessed.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import TopologyError
from .io import file_stem, read_file
from .model import Link, Node, Topology, bidirectional
from .presets import NVLINK_GBPS, PCIE_GBPS, QPI_GBPS

#: The most NVLinks one GPU has (H100, NVLink4). A uniform ``NV#`` clique needing more than
#: this per GPU can only be a switch fabric.
MAX_NVLINKS_PER_GPU = 18
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
SAME_SWITCH = ("PIX", "PXB")
SAME_SOCKET = SAME_SWITCH + ("PHB", "NODE")
OTHER_SOCKET = ("SYS", "SOC")
PCIE_CELLS = SAME_SOCKET + OTHER_SOCKET
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NV = re.compile(r"NV(\d+)")
_GPU = re.compile(r"GPU(\d+)")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclasses.dataclass
class SmiMatrix:
    """The table of ``nvidia-smi topo -m`` as read, before any interpretation."""

    columns: List[str]
    """Device column labels in order (``GPU0``.., then NICs)."""
    cells: Dict[Tuple[str, str], str]
    """(row label, column label) -> cell text."""
    affinity: Dict[str, str]
    """Row label -> NUMA affinity (or CPU affinity when there is no NUMA column)."""
    row_lines: Dict[str, int]
    """Row label -> 1-based line number, for error messages."""
    nic_names: Dict[str, str]
    """``NIC0`` -> ``mlx5_0`` from the ``NIC Legend``, when the output has one."""

    @property
    def gpu_labels(self) -> List[str]:
        return [c for c in self.columns if _GPU.fullmatch(c)]


def load_nvidia_smi(path: str, **options) -> Topology:
    """Read a file holding ``nvidia-smi topo -m`` output; see :func:`topology_from_nvidia_smi`."""
    data, where = read_file(path)
    options.setdefault("name", file_stem(where))
    return topology_from_nvidia_smi(data.decode("utf-8", errors="replace"), where=where, **options)


def topology_from_nvidia_smi(text: str, where: Optional[str] = None, name: str = "nvidia-smi",
                             host: str = "localhost", nvlink_gbps: float = NVLINK_GBPS["v100"],
                             pcie_gbps: float = PCIE_GBPS[3], nvswitch: Optional[bool] = None) -> Topology:
    """Build the Topology that ``nvidia-smi topo -m`` output describes.

    >>> text = "\\tGPU0\\tGPU1\\tCPU Affinity\\nGPU0\\t X \\tNV2\\t0-9\\nGPU1\\tNV2\\t X \\t0-9\\n"
    >>> topo = topology_from_nvidia_smi(text)
    >>> topo.link(0, 1).count, topo.capacity(0, 1)
    (2, 50.0)
    """
    where = where or "nvidia-smi output"
    matrix = parse_smi_matrix(text, where)
    gpus = {label: int(_GPU.fullmatch(label).group(1)) for label in matrix.gpu_labels}
    nodes = [Node(g, "gpu", host) for g in gpus.values()]
    links = _nvlinks(matrix, gpus, where, nvlink_gbps, nvswitch, host, nodes)
    pn, pl = _pcie_tree(matrix, gpus, host, pcie_gbps)
    return Topology.build(name, nodes + pn, links + pl, where)


# ---- reading the table -------------------------------------------------------------------------
def parse_smi_matrix(text: str, where: str) -> SmiMatrix:
    """Read the header, the device rows and the NIC legend; check every cell."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is None:
        raise TopologyError("empty input; expected the output of `nvidia-smi topo -m`", where)
    header = _split(lines[start], header=True)
    if header and header[0] == "":
        header = header[1:]
    if "GPU0" not in header:
        raise TopologyError(f"line {start + 1}: no GPU0 column in the header; expected the output of "
                            "`nvidia-smi topo -m`", where)
    columns, extra = [], []
    for label in header:
        (extra if label in AFFINITY_COLUMNS or extra else columns).append(label)
    if len(set(columns)) != len(columns):
        raise TopologyError(f"line {start + 1}: the header repeats a column", where)
    matrix = SmiMatrix(columns, {}, {}, {}, {})
    i = start + 1
    while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith("Legend"):
        _read_row(matrix, _split(lines[i]), extra, i + 1, where)
        i += 1
    for j in range(i, len(lines)):
        m = _NIC_LEGEND.match(lines[j])
        if m:
            matrix.nic_names[m.group(1)] = m.group(2)
    missing = [g for g in matrix.gpu_labels if g not in matrix.row_lines]
    if missing:
        raise TopologyError(f"line {start + 1}: column {missing[0]} has no row of its own; "
                            "is the output cut short?", where)
    _check_symmetry(matrix, where)
    return matrix


def _split(line: str, header: bool = False) -> List[str]:
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    # Tabs expanded to spaces (a copy from a terminal): split on whitespace, then re-join the
    # header's two- and three-word column names.
    words = line.split()
    if not header:
        return words
    joined = " ".join(words)
    for name in AFFINITY_COLUMNS:
        joined = joined.replace(name, name.replace(" ", "\0"))
    return [""] + [w.replace("\0", " ") for w in joined.split(" ")]


def _read_row(matrix: SmiMatrix, cells: List[str], extra: List[str], lineno: int, where: str) -> None:
    label, values = cells[0], cells[1:]
    if label not in matrix.columns:
        raise TopologyError(f"line {lineno}: row {label!r} is not a column of the header "
                            f"({', '.join(matrix.columns)})", where)
    if label in matrix.row_lines:
        raise TopologyError(f"line {lineno}: row {label} appears twice "
                            f"(first on line {matrix.row_lines[label]})", where)
    if len(values) < len(matrix.columns):
        raise TopologyError(f"line {lineno}: row {label} has {len(values)} cells, expected "
                            f"{len(matrix.columns)} (one per device column of the header)", where)
    matrix.row_lines[label] = lineno
    for column, cell in zip(matrix.columns, values):
        _check_cell(label, column, cell, lineno, where)
        matrix.cells[(label, column)] = cell
    found = dict(zip(extra, values[len(matrix.columns):]))
    affinity = found.get("NUMA Affinity") or found.get("CPU Affinity")
    if affinity and affinity != "N/A":
        matrix.affinity[label] = affinity


def _check_cell(row: str, column: str, cell: str, lineno: int, where: str) -> None:
    if row == column:
        if cell != "X":
            raise TopologyError(f"line {lineno}, column {column}: the diagonal cell is {cell!r}, expected X", where)
        return
    if cell in PCIE_CELLS:
        return
    m = _NV.fullmatch(cell)
    if m and int(m.group(1)) > 0:
        if not (_GPU.fullmatch(row) and _GPU.fullmatch(column)):
            raise TopologyError(f"line {lineno}, column {column}: {cell} between {row} and a NIC; "
                                "NVLink joins GPUs only", where)
        return
    raise TopologyError(f"line {lineno}, column {column}: unknown cell {cell!r}; expected X, NV#, "
                        f"{', '.join(PCIE_CELLS)}", where)


def _check_symmetry(matrix: SmiMatrix, where: str) -> None:
    for (row, column), cell in matrix.cells.items():
        other = matrix.cells.get((column, row))
        if other is not None and other != cell:
            raise TopologyError(f"line {matrix.row_lines[column]}: {column}->{row} is {other} but line "
                                f"{matrix.row_lines[row]} says {row}->{column} is {cell}; the table "
                                "must be symmetric", where)


def _relation(matrix: SmiMatrix, a: str, b: str) -> Optional[str]:
    return matrix.cells.get((a, b)) or matrix.cells.get((b, a))


# ---- NVLink --------------------------------------------------------------------------------------
def _nvlinks(matrix: SmiMatrix, gpus: Dict[str, int], where: str, gbps: float,
             nvswitch: Optional[bool], host: str, nodes: List[Node]) -> List[Link]:
    labels = list(gpus)
    bonds: Dict[Tuple[str, str], int] = {}
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            m = _NV.fullmatch(_relation(matrix, a, b) or "")
            if m:
                bonds[(a, b)] = int(m.group(1))
    pairs = len(labels) * (len(labels) - 1) // 2
    uniform = pairs > 0 and len(bonds) == pairs and len(set(bonds.values())) == 1
    per_gpu = next(iter(bonds.values()), 0)
    if nvswitch is None:
        nvswitch = uniform and (len(labels) - 1) * per_gpu > MAX_NVLINKS_PER_GPU
    elif nvswitch and not uniform:
        raise TopologyError("nvswitch=True needs the same NV# between every pair of GPUs", where)
    links: List[Link] = []
    if nvswitch:
        nodes.append(Node("nvswitch", "switch", host, detail="nvswitch"))
        for label in labels:
            links += bidirectional(gpus[label], "nvswitch", "nvswitch", per_gpu, gbps)
        return links
    for (a, b), count in bonds.items():
        links += bidirectional(gpus[a], gpus[b], "nvlink", count, gbps)
    return links


# ---- PCIe tree -----------------------------------------------------------------------------------
def _pcie_tree(matrix: SmiMatrix, gpus: Dict[str, int], host: str, gbps: float):
    devices = list(matrix.columns)
    socket_of = _components(devices, lambda a, b: _relation(matrix, a, b) in SAME_SOCKET
                            or (a in matrix.affinity and matrix.affinity.get(b) == matrix.affinity[a]))
    switch_of = _components(devices, lambda a, b: _relation(matrix, a, b) in SAME_SWITCH)
    placed = [d for d in devices if d in gpus or _placeable(matrix, d, socket_of)]
    socket_of = _merge_unless_apart(placed, socket_of, lambda a, b: _apart(matrix, a, b))
    sockets = _numbered(placed, socket_of)
    switches = _numbered([d for d in placed if _group_size(d, switch_of) > 1], switch_of)

    def node_id(label):
        return gpus.get(label, label)

    nodes: List[Node] = [Node(f"cpu{s}", "socket", host) for s in sorted(set(sockets.values()))]
    nodes += [Node(f"pcie{s}", "switch", host, detail="pcie") for s in sorted(set(switches.values()))]
    nodes += [Node(d, "nic", host, detail=matrix.nic_names.get(d)) for d in placed if d not in gpus]
    links: List[Link] = []
    linked_switches = set()
    for d in placed:
        socket = f"cpu{sockets[d]}"
        if d in switches:
            switch = f"pcie{switches[d]}"
            links += bidirectional(node_id(d), switch, "pcie", 1, gbps)
            if switch not in linked_switches:
                linked_switches.add(switch)
                links += bidirectional(switch, socket, "pcie", 1, gbps)
        else:
            links += bidirectional(node_id(d), socket, "pcie", 1, gbps)
    names = sorted({n.id for n in nodes if n.kind == "socket"}, key=lambda s: int(s[3:]))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            links += bidirectional(a, b, "qpi", 1, QPI_GBPS)
    return nodes, links


def _apart(matrix: SmiMatrix, a: str, b: str) -> bool:
    """Evidence that a and b sit on different sockets: a SYS cell or different affinities."""
    if _relation(matrix, a, b) in OTHER_SOCKET:
        return True
    return a in matrix.affinity and b in matrix.affinity and matrix.affinity[a] != matrix.affinity[b]


def _merge_unless_apart(items: Sequence[str], groups: Dict[str, int], apart) -> Dict[str, int]:
    """Join socket groups that nothing keeps apart.

    ``NV#`` cells hide the PCIe path, so GPUs joined only by NVLink carry no socket evidence;
    without this step a table of NVLink everywhere and no affinity column would give every GPU
    a socket of its own. Groups are joined greedily in column order.
    """
    members: Dict[int, List[str]] = {}
    for item in items:
        members.setdefault(groups[item], []).append(item)
    merged: List[List[str]] = []
    for group in members.values():
        home = next((m for m in merged if not any(apart(a, b) for a in group for b in m)), None)
        if home is None:
            merged.append(list(group))
        else:
            home.extend(group)
    return {item: i for i, group in enumerate(merged) for item in group}


def _placeable(matrix: SmiMatrix, nic: str, socket_of: Dict[str, int]) -> bool:
    """A NIC can be placed when something shares its socket or its row gives an affinity."""
    return _group_size(nic, socket_of) > 1 or nic in matrix.affinity


def _components(items: Sequence[str], related) -> Dict[str, int]:
    """Union-find over ``items``: item -> representative index of its connected group."""
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(items):
        for j in range(i + 1, len(items)):
            if related(a, items[j]):
                parent[find(j)] = find(i)
    return {item: find(i) for i, item in enumerate(items)}


def _group_size(item: str, groups: Dict[str, int]) -> int:
    return sum(1 for g in groups.values() if g == groups[item])


def _numbered(items: Sequence[str], groups: Dict[str, int]) -> Dict[str, int]:
    """Number the groups 0, 1, .. in order of their first member in ``items``."""
    order: Dict[int, int] = {}
    out = {}
    for item in items:
        out[item] = order.setdefault(groups[item], len(order))
    return out
