"""README.md and docs/ keep up with the repository: the numpy example the README prints is
examples/numpy_collectives.py word for word, every file the README and docs/*.md point to exists,
docs/configuration.md's settings table names every variable blinkflow.config.Config reads (and
no variable it does not read), and the README's "Documents" lists every docs/*.md. A
reader who follows them never meets a stale listing, a missing file or a setting nobody told them
about."""
import dataclasses
import pathlib
import re

from blinkflow.config import Config

ROOT = pathlib.Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
#: Paths the README names in another project (Horovod's examples folder).
ELSEWHERE = {"examples/tensorflow2"}


def test_the_numpy_listing_is_the_example_file():
    example = (ROOT / "examples" / "numpy_collectives.py").read_text()
    listing = README[README.index("```python\nimport numpy as np\n") + len("```python\n"):]
    listing = listing[:listing.index("```\n")]
    assert example.endswith(listing), "README's numpy listing differs from examples/numpy_collectives.py"


def test_every_repository_path_the_readme_and_the_docs_name_exists():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        named = set(re.findall(r"(?<![\w/.])((?:examples|docs|tests|launcher|kernels|blinkflow)/[\w./-]*\w)", text))
        missing = sorted(path for path in named if path not in ELSEWHERE and not (ROOT / path).exists())
        assert not missing, (doc.name, missing)


def test_the_settings_table_names_every_setting_and_no_other():
    table = [line for line in CONFIGURATION[:CONFIGURATION.index("## blinkrun's flags")].splitlines()
             if line.startswith("| `BLINKFLOW_")]
    named = {name for line in table for name in re.findall(r"`(BLINKFLOW_[A-Z0-9_]+)`", line)}
    assert table, "the pattern no longer finds docs/configuration.md's table"
    assert sorted(named) == sorted(Config.env_name(f.name) for f in dataclasses.fields(Config))


def test_every_document_is_listed_under_documents():
    listed = README[README.index("## Documents"):]
    unlisted = sorted(doc.name for doc in (ROOT / "docs").glob("*.md") if f"`docs/{doc.name}`" not in listed)
    assert not unlisted, unlisted


def test_every_test_file_tests_readme_names_exists():
    """tests/README.md's map names files as ``folder/name.py`` or, after one, ``name.py`` of the
    same folder; a ``*`` stands for any characters. Each must match a file."""
    text = (ROOT / "tests" / "README.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)?[\w*]+\.py)`", text))
    assert len(named) > 30, "the pattern no longer finds tests/README.md's files"
    tests = ROOT / "tests"
    missing = sorted(n for n in named if not list(tests.glob(n)) and not list(tests.glob("*/" + n)))
    assert not missing, missing
