"""The planner's modules import each other only at module level, in an order without a cycle: no
planner module needs a function-level import to break a circle (the package-wide check, which
counts function-level imports too, is test_import_cycles.py)."""
import ast
import pathlib

import blinkflow.planner
from test_import_cycles import find_cycle

PLANNER = pathlib.Path(blinkflow.planner.__file__).parent


def _imports(path: pathlib.Path):
    """Planner modules ``path`` imports: (name, at module level?) for every relative import."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            out += [(name.split(".")[0], id(node) in top) for name in names]
    return out


def test_planner_modules_import_at_module_level_and_form_no_cycle():
    graph = {}
    for path in sorted(PLANNER.glob("*.py")):
        if path.stem == "__init__":  # the package loads OR-Tools lazily on first use
            continue
        found = _imports(path)
        late = sorted({name for name, top in found if not top})
        assert not late, f"{path.name} imports {late} inside a function"
        graph[path.stem] = sorted({name for name, _ in found})
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
