"""The docs stay in step with the repository: every recipe is listed in docs/recipes.md, every docs page is linked
from the README, and no relative markdown link in README.md or docs/*.md points at a missing file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)  # fenced code blocks
CODE = re.compile(r"`[^`\n]*`")  # inline code spans
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.I)  # http:, mailto:, //host, #anchor


def relative_links(page: Path) -> list[str]:
    """Targets of the markdown links in ``page`` that name a file (no URL, no bare anchor), outside code."""
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return [target for target in LINK.findall(text) if not EXTERNAL.match(target)]


def test_there_is_something_to_check():
    assert RECIPES and DOCS and (ROOT / "docs" / "recipes.md").is_file()


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_recipe_is_listed_in_docs_recipes(recipe):
    listed = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    name = recipe.relative_to(ROOT).as_posix()
    assert name in listed, f"{name} is not mentioned in docs/recipes.md: add a row to its table"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files(page):
    broken = []
    for target in relative_links(page):
        path = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (page.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(target)
    where = page.relative_to(ROOT)
    assert not broken, f"{where} links to missing files: {', '.join(broken)}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in relative_links(ROOT / "README.md")}
    missing = [page.relative_to(ROOT).as_posix() for page in DOCS if page.resolve() not in linked]
    assert not missing, f"README.md does not link {', '.join(missing)}: add them to its Documentation section"


def test_the_link_finder_sees_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        'See [a](a.md#part), ![img](img/x.png "t"), [web](https://x.org), [top](#top), [c](<c.md>).\n'
        "`[not](inline.md)`\n```\n[not](fenced.md)\n```\nE_ref[f(r)] is not a link.\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["a.md#part", "img/x.png", "c.md"]
