"""Every package's docstring lists its modules as they are.

The convention: a package's ``__init__.py`` docstring names each module file of the package
(``*.py`` except ``__init__`` and ``__main__``) and each subpackage on a line of its own that
starts with the name in double backquotes (after indentation and an optional ``*`` bullet),
followed by the module's job::

    ``ir``         the plain-dataclass IR, its rules and JSON round-trip

The set of names so written must equal the set of modules and subpackages: nothing missing,
nothing that no longer exists. Names written elsewhere in a line (``blinkflow.schedule.ir``,
prose) do not count.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = ("blinkflow", "launcher", "kernels")
LISTED = re.compile(r"^\s*(?:\*\s+)?``([A-Za-z_][A-Za-z0-9_]*)``(?:\s|$)")


def packages() -> list:
    """Every package folder under the package roots, relative to the repository."""
    found = []
    for top in PACKAGE_ROOTS:
        found.extend(sorted(p.parent for p in (ROOT / top).rglob("__init__.py")))
    return [str(p.relative_to(ROOT)) for p in found]


def modules_of(package: Path) -> set:
    """The names a package's docstring must list: its module files and its subpackages."""
    names = {p.stem for p in package.glob("*.py")} - {"__init__", "__main__"}
    names |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return names


def listed_in(docstring: str) -> set:
    """The names written as ````name```` at the start of a docstring line."""
    return {m.group(1) for line in docstring.splitlines() for m in [LISTED.match(line)] if m}


def test_the_convention_reads_names_at_line_starts_only():
    text = "Intro naming ``elsewhere`` mid-line.\n\n``ir``  the IR\n  * ``lower``  lowering\n``a.b`` dotted\n"
    assert listed_in(text) == {"ir", "lower"}


def test_every_package_is_found():
    assert {"blinkflow", "blinkflow/schedule", "blinkflow/backends/cuda", "launcher", "kernels"} <= set(packages())


@pytest.mark.parametrize("package", packages())
def test_package_docstring_lists_its_modules(package):
    folder = ROOT / package
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    actual, listed = modules_of(folder), listed_in(docstring)
    assert not actual - listed, f"{package}/__init__.py does not list {sorted(actual - listed)}"
    assert not listed - actual, f"{package}/__init__.py lists modules that do not exist: {sorted(listed - actual)}"
