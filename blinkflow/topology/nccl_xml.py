"""Parse NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) into a :class:`Topology`.

The format is NCCL's own XML (``src/graph/xml.cc`` and ``topo.cc`` in NVIDIA/nccl; the static
files that cloud vendors feed back through ``NCCL_TOPO_FILE`` have the same shape)::

    <system version="1">
      <cpu numaid="0" affinity=".." arch="x86_64" vendor="GenuineIntel" ..>
        <pci busid="0000:05:00.0" class="0x060400" link_speed="8.0 GT/s PCIe" link_width="16">
          <pci busid="0000:06:00.0" class="0x030200" link_speed=".." link_width="16">
            <gpu dev="0" sm="70" rank="0" gdr="1">
              <nvlink target="0000:07:00.0" count="2" tclass="0x030200"/>
            </gpu>
          </pci>
          <pci busid="0000:08:00.0" class="0x020700" ..><nic><net name="mlx5_0" speed="100000" ../></nic></pci>
        </pci>
      </cpu>
    </system>

How it maps onto the graph:

* ``<cpu numaid=N>`` → socket ``cpuN``; sockets are joined pairwise by ``qpi`` links (10 GB/s,
  presets.py).
* A ``<pci>`` bridge (class ``0x0604..``) → a PCIe switch node ``pci:<busid>``; every ``<pci>``
  links to its parent with the capacity of its own ``link_speed`` × ``link_width`` (Gen3 x16 =
  12 GB/s, scaled by generation and width; width 0 or missing counts as x16).
* ``<gpu>`` → a GPU. Its id is ``dev`` when the ``dev`` values are distinct; a dump written by
  one process per GPU gives every GPU ``dev="0"``, and then GPUs are numbered in PCI bus-id
  order, which is the order ``nvidia-smi`` numbers them.
* ``<nvlink target=busid count=k tclass=..>``: ``tclass`` ``0x068000`` is an NVSwitch — every
  such link of every GPU goes to one switch node ``nvswitch`` (NCCL merges the switches the same
  way); a GPU class (``0x03....``) target is a point-to-point bundle to that GPU. NVLink runs at
  20 GB/s per link on ``sm`` 60 (P100) and 25 on later GPUs, as in presets.py.
* ``<nic>`` with ``<net name speed>`` (speed in Mb/s) → a NIC named after its first ``net``.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple
from xml.parsers import expat

from ..errors import TopologyError
from .io import file_stem, read_file
from .model import Link, Node, Topology, bidirectional
from .presets import NVLINK_GBPS, QPI_GBPS

NVSWITCH_CLASS = "0x068000"
BRIDGE_CLASS_PREFIX = "0x0604"
GPU_CLASS_PREFIX = "0x03"
#: PCIe GB/s per direction of an x16 link by generation (Gen3 12 is NCCL's figure; each
#: generation doubles the per-lane rate).
PCIE_X16_GBPS = {1: 3.0, 2: 6.0, 3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
_GT_PER_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclasses.dataclass
class XmlElement:
    """One element of the dump with the line it starts on (``xml.etree`` forgets lines)."""

    tag: str
    attrs: Dict[str, str]
    line: int
    children: List["XmlElement"] = dataclasses.field(default_factory=list)


def load_nccl_xml(path: str, **options) -> Topology:
    """Read an NCCL topology dump; see :func:`topology_from_nccl_xml`."""
    data, where = read_file(path)
    options.setdefault("name", file_stem(where))
    return topology_from_nccl_xml(data, where=where, **options)


def parse_xml(data, where: str) -> XmlElement:
    """Parse XML text or bytes into :class:`XmlElement`s; malformed XML names its line."""
    root: List[XmlElement] = []
    stack: List[XmlElement] = []
    parser = expat.ParserCreate()

    def start(tag, attrs):
        element = XmlElement(tag, dict(attrs), parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(element)
        stack.append(element)

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise TopologyError(f"line {e.lineno}: malformed XML ({expat.ErrorString(e.code)}, column {e.offset + 1})",
                            where) from None
    return root[0]


def topology_from_nccl_xml(data, where: Optional[str] = None, name: str = "nccl-xml",
                           host: str = "localhost") -> Topology:
    """Build the Topology an NCCL topology dump describes (see the module docstring)."""
    where = where or "NCCL topology XML"
    system = parse_xml(data, where)
    if system.tag != "system":
        raise TopologyError(f"line {system.line}: the root element is <{system.tag}>, expected <system> "
                            "(an NCCL_TOPO_DUMP_FILE)", where)
    builder = _Builder(where, host)
    for child in system.children:
        if child.tag == "cpu":
            builder.cpu(child)
    return builder.finish(name)


class _Builder:
    """Walks the element tree once, collecting nodes and links."""

    def __init__(self, where: str, host: str):
        self.where = where
        self.host = host
        self.nodes: List[Node] = []
        self.links: List[Link] = []
        self.gpus: List[Tuple[str, XmlElement, str]] = []  # (busid, <gpu>, parent node id)
        self.gpu_links: List[Tuple[str, float]] = []  # (busid of the <pci> of the GPU, gbps)
        self.sockets: List[str] = []

    def error(self, element: XmlElement, message: str) -> TopologyError:
        return TopologyError(f"line {element.line}: {message}", self.where)

    def attr(self, element: XmlElement, key: str) -> str:
        value = element.attrs.get(key)
        if value is None:
            raise self.error(element, f"<{element.tag}> has no {key!r} attribute")
        return value

    def cpu(self, element: XmlElement) -> None:
        numaid = element.attrs.get("numaid", str(len(self.sockets)))
        socket = f"cpu{numaid}"
        if socket in self.sockets:
            raise self.error(element, f"a second <cpu numaid={numaid!r}>")
        self.sockets.append(socket)
        self.nodes.append(Node(socket, "socket", self.host, detail=element.attrs.get("arch")))
        for child in element.children:
            self.device(child, socket)

    def device(self, element: XmlElement, parent: str) -> None:
        if element.tag == "nic":
            self.nic(element, parent, PCIE_X16_GBPS[3])
        elif element.tag == "pci":
            self.pci(element, parent)

    def pci(self, element: XmlElement, parent: str) -> None:
        busid = self.attr(element, "busid").lower()
        cls = element.attrs.get("class", "").lower()
        gbps = self.pcie_gbps(element)
        gpu = next((c for c in element.children if c.tag == "gpu"), None)
        nic = next((c for c in element.children if c.tag == "nic"), None)
        if gpu is not None:
            self.gpus.append((busid, gpu, parent))
            self.gpu_links.append((busid, gbps))
        elif nic is not None:
            self.nic(nic, parent, gbps)
        elif cls.startswith(BRIDGE_CLASS_PREFIX) or any(c.tag == "pci" for c in element.children):
            switch = f"pci:{busid}"
            self.nodes.append(Node(switch, "switch", self.host, detail="pcie"))
            self.links += bidirectional(switch, parent, "pcie", 1, gbps)
            for child in element.children:
                self.device(child, switch)
        # Any other PCI function (an NVSwitch's own PCI entry, a storage controller) carries no
        # collective traffic in this model.

    def pcie_gbps(self, element: XmlElement) -> float:
        speed = element.attrs.get("link_speed", "")
        m = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
        gen = 3  # no speed given: Gen3, as before
        if m:
            gen = _GT_PER_GEN.get(float(m.group(1))) if re.fullmatch(r"[0-9]+(\.[0-9]+)?", m.group(1)) else None
        if gen is None:
            raise self.error(element, f"link_speed {speed!r} is no PCIe generation "
                                      f"({', '.join(f'{s:g} GT/s' for s in _GT_PER_GEN)})")
        width_text = element.attrs.get("link_width", "16")
        if not width_text.isdecimal():
            raise self.error(element, f"link_width {width_text!r} is not a lane count")
        width = int(width_text) or 16
        return PCIE_X16_GBPS[gen] * width / 16

    def nic(self, element: XmlElement, parent: str, gbps: float) -> None:
        net = next((c for c in element.children if c.tag == "net"), None)
        if net is None:
            raise self.error(element, "<nic> without a <net name=..> child")
        name = self.attr(net, "name")
        speed = net.attrs.get("speed", "")
        detail = f"{int(speed) / 8000:g}GB/s" if speed.isdecimal() and int(speed) > 0 else None
        if any(n.id == name for n in self.nodes):
            return  # NCCL lists a socket NIC once under every <cpu>; keep the first
        self.nodes.append(Node(name, "nic", self.host, detail=detail))
        self.links += bidirectional(name, parent, "pcie", 1, gbps)

    def finish(self, name: str) -> Topology:
        ids = self.gpu_ids()
        for (busid, gpu, parent), (_, gbps) in zip(self.gpus, self.gpu_links):
            sm = gpu.attrs.get("sm", "")
            self.nodes.append(Node(ids[busid], "gpu", self.host, detail=f"sm{sm}" if sm else None))
            self.links += bidirectional(ids[busid], parent, "pcie", 1, gbps)
        self.links += self.nvlinks(ids)
        for i, a in enumerate(self.sockets):
            for b in self.sockets[i + 1:]:
                self.links += bidirectional(a, b, "qpi", 1, QPI_GBPS)
        if not self.gpus:
            raise TopologyError("no <gpu> element anywhere under <system>/<cpu>", self.where)
        return Topology.build(name, self.nodes, self.links, self.where)

    def gpu_ids(self) -> Dict[str, int]:
        devs = []
        for _, gpu, _ in self.gpus:
            dev = gpu.attrs.get("dev", "")
            if not dev.isdecimal():
                devs = None
                break
            devs.append(int(dev))
        if devs is not None and len(set(devs)) == len(devs):
            return {busid: dev for (busid, _, _), dev in zip(self.gpus, devs)}
        return {busid: i for i, busid in enumerate(sorted(b for b, _, _ in self.gpus))}

    def nvlinks(self, ids: Dict[str, int]) -> List[Link]:
        links: List[Link] = []
        bonds: Dict[Tuple[int, int], Tuple[int, XmlElement]] = {}
        for busid, gpu, _ in self.gpus:
            per_link = NVLINK_GBPS["p100"] if gpu.attrs.get("sm") == "60" else NVLINK_GBPS["v100"]
            to_switch = 0
            for nvlink in (c for c in gpu.children if c.tag == "nvlink"):
                count_text = self.attr(nvlink, "count")
                if not count_text.isdecimal() or int(count_text) < 1:
                    raise self.error(nvlink, f"count {count_text!r} is not a positive integer")
                count = int(count_text)
                tclass = nvlink.attrs.get("tclass", "").lower()
                target = self.attr(nvlink, "target").lower()
                if tclass == NVSWITCH_CLASS:
                    to_switch += count
                elif tclass.startswith(GPU_CLASS_PREFIX) or target in ids:
                    if target not in ids:
                        raise self.error(nvlink, f"nvlink target {target} is no GPU of this dump")
                    links.append(Link(ids[busid], ids[target], "nvlink", count, count * per_link))
                    self.check_pair(bonds, ids[busid], ids[target], count, nvlink)
                else:
                    raise self.error(nvlink, f"nvlink to a device of class {tclass!r} at {target}; "
                                             f"only GPUs and NVSwitches ({NVSWITCH_CLASS}) are modelled")
            if to_switch:
                if not any(n.id == "nvswitch" for n in self.nodes):
                    self.nodes.append(Node("nvswitch", "switch", self.host, detail="nvswitch"))
                links += bidirectional(ids[busid], "nvswitch", "nvswitch", to_switch, per_link)
        # A dump cut down to some GPUs may list a bundle from one side only; NVLink is symmetric.
        for (a, b), (count, _) in bonds.items():
            if (b, a) not in bonds:
                forward = next(l for l in links if l.src == a and l.dst == b)
                links.append(Link(b, a, "nvlink", count, forward.gbps))
        return links

    def check_pair(self, bonds, a: int, b: int, count: int, element: XmlElement) -> None:
        """Both GPUs list the bundle between them; the two counts must agree."""
        if (a, b) in bonds:
            raise self.error(element, f"GPU {a} lists its nvlink to GPU {b} twice "
                                      f"(also line {bonds[(a, b)][1].line})")
        bonds[(a, b)] = (count, element)
        other = bonds.get((b, a))
        if other is not None and other[0] != count:
            raise self.error(element, f"GPU {a} has {count} nvlinks to GPU {b}, but line {other[1].line} "
                                      f"says GPU {b} has {other[0]} to GPU {a}")
