"""The front door and the manual: a README of at most 250 lines that links every page of docs/, and user pages that
tell no story of how the project was made (no commit hashes, no "issue", no "this session")."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MANUAL = ["training", "data", "results", "performance", "guarantees", "architecture", "experiments", "annotated"]
USER_PAGES = [README, ROOT / "model_card.md", *(ROOT / "docs" / f"{page}.md" for page in MANUAL)]


def test_the_readme_is_a_front_door_of_at_most_250_lines_that_renders_on_pypi():
    assert len(README.read_text().splitlines()) <= 250
    markdown = pytest.importorskip("readme_renderer.markdown")
    html = markdown.render(README.read_text(), variant="GFM")  # as PyPI renders a text/markdown description
    assert html is not None and html.count("<table>") >= 1 and re.search(r"<h2[^>]*>Results<", html)


@pytest.mark.parametrize("page", MANUAL)
def test_the_readme_links_every_page_of_the_manual_and_each_exists(page):
    assert f"(docs/{page}.md)" in README.read_text()
    assert (ROOT / "docs" / f"{page}.md").is_file()


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_user_pages_name_no_commit_issue_session_or_machine(page):
    text = page.read_text()
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text), "a commit hash"
    assert not re.findall(r"\b(?:the )?issues?\b|this session|this machine|next lease", text, flags=re.I)


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_of_a_user_page_points_at_a_file(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if not re.match(r"[a-z]+://|mailto:", target):
            assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"
