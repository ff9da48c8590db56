"""The planner's modules import each other without a cycle (issue 19): every import sits at
module level and the graph they form has an order, so no module needs a function-level import
to break a circle (``make`` -> ``multihost`` -> ``make`` held one open before)."""
import ast
import pathlib

import blinkflow.planner

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


def _cycle(graph):
    """One cycle of a directed graph as a list of nodes, or None (depth-first search)."""
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


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"make": ["multihost"], "multihost": ["assemble", "make"]}) == ["make", "multihost", "make"]
    assert _cycle({"make": ["multihost"], "multihost": ["assemble"]}) is None


def test_planner_modules_import_at_module_level_and_form_no_cycle():
    graph = {}
    for path in sorted(PLANNER.glob("*.py")):
        if path.stem == "__init__":  # the package loads OR-Tools lazily on first use
            continue
        found = _imports(path)
        late = sorted({name for name, top in found if not top})
        assert not late, f"{path.name} imports {late} inside a function"
        graph[path.stem] = sorted({name for name, _ in found})
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"
