"""docs/runtime.md's "One gradient's route" stays true to the code: every module it names
exists, every function it names right after its module (`path` `Name.attr`) is defined there,
and each route's numbered hops run on from the shared ones without passing the count its
heading states. A renamed function, a moved module or a hop added to the list without the
count fails here."""
import ast
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[2]
DOC = (ROOT / "docs" / "runtime.md").read_text()
#: Optional packages a module may need to import; without them its functions are found by parsing it.
OPTIONAL = {"tensorflow", "keras", "cupy"}


def _section() -> str:
    start = DOC.index("## One gradient's route\n")
    end = DOC.index("\n## ", start + 1)
    return DOC[start:end]


SECTION = _section()
PATH = r"`(blinkflow/[\w/]+\.py)`"
PAIRS = sorted(set(re.findall(PATH + r"\s+`([A-Za-z_][\w.]*)`", SECTION)))
PATHS = sorted(set(re.findall(PATH, SECTION)))


def _routes():
    """[(heading, stated hops or None, [(number, text)])] in the order of the section."""
    routes = []
    for line in SECTION.splitlines():
        heading = re.fullmatch(r"\*\*(.+)\*\*", line)
        if heading:
            stated = re.search(r"(\d+) hops", heading.group(1))
            routes.append((heading.group(1), int(stated.group(1)) if stated else None, []))
            continue
        hop = re.match(r"(\d+)\. (.*)", line)
        if hop and routes:
            routes[-1][2].append((int(hop.group(1)), hop.group(2)))
    return routes


def _defined(path: pathlib.Path, dotted: str) -> bool:
    """Whether ``dotted`` (a function, a class, a class's method or a module constant) is defined
    at the top of ``path``'s source."""
    scope = ast.parse(path.read_text()).body
    for part in dotted.split("."):
        found = None
        for node in scope:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
                [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
            if part in names:
                found = node
                break
        if found is None:
            return False
        scope = getattr(found, "body", [])
    return True


def test_the_section_names_modules_and_functions():
    assert len(PATHS) > 20 and len(PAIRS) > 30, "the patterns no longer find the section's names"


@pytest.mark.parametrize("path", PATHS)
def test_every_module_named_exists(path):
    assert (ROOT / path).is_file(), path


@pytest.mark.parametrize("path,name", PAIRS)
def test_every_function_named_exists(path, name):
    module_name = path[:-len(".py")].replace("/", ".")
    try:
        target = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in OPTIONAL:
            raise
        assert _defined(ROOT / path, name), f"{path} defines no {name}"
        return
    for part in name.split("."):
        assert hasattr(target, part), f"{path}: {name} (no {part!r})"
        target = getattr(target, part)


def test_every_method_named_is_one_named_with_its_module():
    """A ``Class.method`` the section names without its module is one it names with it elsewhere
    (so the test above has checked it)."""
    with_module = {name for _, name in PAIRS}
    bare = set(re.findall(r"`([A-Z]\w*\.[A-Za-z_]\w*)`", SECTION))
    assert bare <= with_module, sorted(bare - with_module)


def test_each_route_has_at_most_the_hops_it_states():
    routes = _routes()
    shared_heading, _, shared = routes[0]
    assert "hops 1-" in shared_heading, "the first list is the hops both backends share"
    assert [n for n, _ in shared] == list(range(1, len(shared) + 1))
    branches = routes[1:]
    assert len(branches) >= 5, [h for h, _, _ in branches]  # host: packed, single copy; device: runner, executor, NCCL
    for heading, stated, hops in branches:
        assert stated is not None, heading
        numbers = [n for n, _ in hops]
        assert numbers == list(range(len(shared) + 1, len(shared) + len(hops) + 1)), (heading, numbers)
        assert len(shared) + len(hops) <= stated, (heading, len(shared) + len(hops), stated)


def test_each_hop_names_its_module_and_function_first():
    for heading, _, hops in _routes():
        for number, text in hops:
            assert re.match(PATH + r" `[A-Za-z_][\w.]*`", text), (heading, number, text[:80])
