"""What an index page and a README shown outside the repository need: project URLs, classifiers that
match the Python versions errands supports, and README links that still lead somewhere there."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the suite runs on 3.11+
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_metadata_names_the_project_home_and_classifies_it():
    project = _project()
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = project["classifiers"]
    minimum = int(re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1))
    versions = {int(c.rsplit(".", 1)[1]) for c in classifiers
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert min(versions) == minimum, "the oldest Python classifier is the requires-python floor"
    assert "Typing :: Typed" in classifiers and (ROOT / "src" / "errands" / "py.typed").exists()


def test_readme_links_are_absolute_and_lead_to_files_of_the_tree():
    """PyPI and other mirrors show README.md without the repository around it: relative links die there."""
    source = _project()["urls"]["Source"].rstrip("/")
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, "README.md has no links?"
    for link in links:
        if link.startswith("#"):
            continue
        assert re.match(r"https?://", link), f"relative link in README.md: {link}"
        for kind in ("blob", "tree"):
            prefix = f"{source}/{kind}/main/"
            if link.startswith(prefix):
                target = ROOT / link[len(prefix):].split("#", 1)[0]
                assert target.exists(), f"README.md links to {link}, but {target.relative_to(ROOT)} does not exist"
                assert (kind == "tree") == target.is_dir(), f"{link}: use tree/ for folders, blob/ for files"


def test_install_page_is_in_the_site_and_says_how_to_install_before_publication():
    assert "install.md" in (ROOT / "mkdocs.yml").read_text()
    page = (ROOT / "docs" / "install.md").read_text()
    assert "not published on PyPI yet" in page and "make dist" in page
    assert "make dist" in (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^dist: ", makefile, re.M), "make dist is documented but not a target"
