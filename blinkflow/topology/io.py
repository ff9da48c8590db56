"""blinkflow's own topology JSON (docs/topology.md): load and save with a schema version.

Errors name the file and the field at fault, so ``blinkrun`` can print one line and exit 2.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional, Tuple

from ..errors import TopologyError
from .model import SCHEMA_VERSION, Link, Node, Topology

#: Bytes of a topology file: the largest real machine description is a few hundred kilobytes
#: (thousands of links); a bigger file is a mistake (a wrong path, a data file) and would cost
#: every rank its memory and seconds before failing.
MAX_TOPOLOGY_BYTES = 16 << 20
#: Nesting of a topology JSON: the format is three levels deep (object, list, object); the
#: limit keeps a hostile file from exhausting the parser's recursion (RecursionError).
MAX_NESTING = 32


def topology_from_dict(data: Any, where: Optional[str] = None) -> Topology:
    """Parse the JSON object of ``blinkrun topo --json`` into a validated Topology."""
    if not isinstance(data, dict):
        raise TopologyError("the top level must be a JSON object", where)
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        raise TopologyError(f"field 'schema' is {schema!r}; this blinkflow reads schema {SCHEMA_VERSION}", where)
    name = data.get("name", "topology")
    if not isinstance(name, str):
        raise TopologyError("field 'name' must be a string", where)
    nodes = [_node(entry, i, where) for i, entry in enumerate(_list(data, "nodes", where))]
    links = [_link(entry, i, where) for i, entry in enumerate(_list(data, "links", where))]
    return Topology.build(name, nodes, links, where)


def topology_from_json(text: str, where: Optional[str] = None) -> Topology:
    """Parse topology JSON text; invalid JSON raises TopologyError naming the line."""
    if len(text) > MAX_TOPOLOGY_BYTES:
        raise TopologyError(f"{len(text)} characters is more than a topology holds (at most {MAX_TOPOLOGY_BYTES}); "
                            "check that this is the topology file", where)
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise TopologyError(f"JSON nested {depth} levels deep; a topology is an object of lists of objects "
                            f"(at most {MAX_NESTING} levels are read)", where)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"line {e.lineno}: invalid JSON ({e.msg})", where) from None
    return topology_from_dict(data, where)


def _nesting(text: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``text``, brackets inside strings
    excluded (a scan of the structural characters only; no recursion)."""
    if "[" not in text and "{" not in text:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def load_topology(path: str) -> Topology:
    """Read a topology JSON file; every problem raises TopologyError naming the file."""
    data, where = read_file(path)
    return topology_from_json(data.decode("utf-8", errors="replace"), where)


def read_file(path: str) -> Tuple[bytes, str]:
    """The bytes of a topology file and its name for error messages; an unreadable file
    raises TopologyError naming it (every loader reads through here)."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOPOLOGY_BYTES + 1)
    except OSError as e:
        raise TopologyError(f"cannot read: {e.strerror}", where) from None
    if len(data) > MAX_TOPOLOGY_BYTES:
        raise TopologyError(f"the file is larger than a topology can be ({MAX_TOPOLOGY_BYTES} bytes at most); check "
                            "that this is the topology file", where)
    return data, where


def file_stem(where: str) -> str:
    """A topology's default name: its file name without folder and extension."""
    return os.path.splitext(os.path.basename(where))[0]


def save_topology(topology: Topology, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(topology.to_json())
        f.write("\n")


def _list(data: dict, key: str, where):
    value = data.get(key)
    if not isinstance(value, list):
        raise TopologyError(f"field '{key}' must be a list", where)
    return value


def _field(entry: dict, key: str, field: str, where, types, required=True, default=None):
    if key not in entry:
        if required:
            raise TopologyError(f"{field}.{key} is missing", where)
        return default
    value = entry[key]
    if not isinstance(value, types) or isinstance(value, bool):
        raise TopologyError(f"{field}.{key} has the wrong type ({type(value).__name__})", where)
    return value


def _node(entry: Any, i: int, where) -> Node:
    field = f"nodes[{i}]"
    if not isinstance(entry, dict):
        raise TopologyError(f"{field} must be an object", where)
    return Node(
        id=_field(entry, "id", field, where, (int, str)),
        kind=_field(entry, "kind", field, where, str),
        host=_field(entry, "host", field, where, str, required=False, default="localhost"),
        detail=_field(entry, "detail", field, where, str, required=False),
    )


def _link(entry: Any, i: int, where) -> Link:
    field = f"links[{i}]"
    if not isinstance(entry, dict):
        raise TopologyError(f"{field} must be an object", where)
    return Link(
        src=_field(entry, "src", field, where, (int, str)),
        dst=_field(entry, "dst", field, where, (int, str)),
        kind=_field(entry, "kind", field, where, str),
        count=_field(entry, "count", field, where, int, required=False, default=1),
        gbps=float(_field(entry, "gbps", field, where, (int, float))),
        latency_us=float(_field(entry, "latency_us", field, where, (int, float), required=False, default=0.0)),
    )
