"""README.md keeps up with the repository: the numpy example it prints is
examples/numpy_collectives.py word for word, every file it points to exists, its settings table
names every variable blinkflow.config.Config reads, and "Documents" lists every docs/*.md. A reader
who follows it never meets a stale listing, a missing file or a setting nobody told them about."""
import dataclasses
import pathlib
import re

from blinkflow.config import Config

ROOT = pathlib.Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
#: Paths the README names in another project (Horovod's examples folder).
ELSEWHERE = {"examples/tensorflow2"}


def test_the_numpy_listing_is_the_example_file():
    example = (ROOT / "examples" / "numpy_collectives.py").read_text()
    listing = README[README.index("```python\nimport numpy as np\n") + len("```python\n"):]
    listing = listing[:listing.index("```\n")]
    assert example.endswith(listing), "README's numpy listing differs from examples/numpy_collectives.py"


def test_every_repository_path_the_readme_names_exists():
    named = set(re.findall(r"(?<![\w/.])((?:examples|docs|tests|launcher|kernels|blinkflow)/[\w./-]*\w)", README))
    assert named, "the pattern no longer finds the README's paths"
    missing = sorted(path for path in named if path not in ELSEWHERE and not (ROOT / path).exists())
    assert not missing, missing


def test_every_setting_has_its_variable_in_the_readme():
    missing = [Config.env_name(f.name) for f in dataclasses.fields(Config)
               if f"`{Config.env_name(f.name)}`" not in README]
    assert not missing, missing


def test_every_document_is_listed_under_documents():
    listed = README[README.index("## Documents"):]
    unlisted = sorted(doc.name for doc in (ROOT / "docs").glob("*.md") if f"`docs/{doc.name}`" not in listed)
    assert not unlisted, unlisted
