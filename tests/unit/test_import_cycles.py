"""No module of blinkflow (nor of its launcher) imports itself through others.

The graph is static, read from the source: every ``import`` and ``from ... import`` naming a
module of the package counts, at module level or inside a function, since a function-level
import that closes a circle is still a circle, only one that fails later. Importing a name from
a package (``from .x import y``) is an edge to the module ``x.y`` when that is a module, else to
``x``; the implicit import of parent packages is not an edge (every module would then be on a
circle through its package's ``__init__``).
"""
import ast
import pathlib
from typing import Dict, List, Optional

import blinkflow
import blinkflow.launcher

PACKAGES = {"blinkflow": pathlib.Path(blinkflow.__file__).parent,
            "blinkflow.launcher": pathlib.Path(blinkflow.launcher.__file__).parent}


def modules_of(packages: Dict[str, pathlib.Path]) -> Dict[str, pathlib.Path]:
    """Dotted module name -> source file of every module under each package's folder."""
    out = {}
    for package, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package] + parts)] = path
    return out


def import_graph(modules: Dict[str, pathlib.Path]) -> Dict[str, List[str]]:
    """Module -> the modules of ``modules`` it imports anywhere in its source."""
    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        targets.add(f"{source}.{alias.name}")
                    elif source in modules:
                        targets.add(source)
        graph[name] = sorted(targets - {name})
    return graph


def find_cycle(graph: Dict[str, List[str]]) -> Optional[List[str]]:
    """One cycle of a directed graph as a list of nodes (first == last), or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in graph.get(n, ()):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_module_of_blinkflow_or_the_launcher_is_on_an_import_cycle():
    modules = modules_of(PACKAGES)
    assert "blinkflow.runtime.api" in modules and "blinkflow.launcher.cli" in modules
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_check_finds_a_cycle_closed_inside_a_function(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .api import run\n")
    (package / "api.py").write_text("from .sub import sets\n\ndef run():\n    return sets.ranks()\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "sets.py").write_text("def ranks():\n    from .. import api\n    return api\n")
    graph = import_graph(modules_of({"pkg": package}))
    assert graph["pkg"] == ["pkg.api"] and graph["pkg.sub"] == []
    assert find_cycle(graph) == ["pkg.api", "pkg.sub.sets", "pkg.api"]
    (package / "sub" / "sets.py").write_text("def ranks():\n    return 0\n")
    assert find_cycle(import_graph(modules_of({"pkg": package}))) is None
