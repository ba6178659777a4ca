"""The pages as the site renders them: each page rendered with the site's Markdown engine
(Python-Markdown with mkdocs.yml's extensions, as ``mkdocs build`` loads them). Every fenced
block comes out as the code block it is in the source, every list item is an item of the kind
its marker says (a line that starts with ``0.`` in a paragraph of a bullet list became an item
of it), and no list or table is left as a paragraph's text (a list must follow a blank line
here). The engine is a development tool (the ``dev`` extra): .venv-oldest leaves this module
out (Makefile), as it does the API reference's build."""

from __future__ import annotations

import html
import re
from pathlib import Path

import markdown
import pytest
from markdown.blockprocessors import OListProcessor, UListProcessor
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


class _Items:
    """The list items the engine made: (the list's tag, the marker of the item's line)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def processor(self, base: type[OListProcessor]) -> type[OListProcessor]:
        seen = self.seen

        class Recording(base):  # type: ignore[valid-type, misc]
            def get_items(self, block: str) -> list[str]:
                for line in block.split("\n"):
                    match = self.CHILD_RE.match(line)
                    if match:
                        seen.append((self.TAG, match.group(1), line.strip()))
                return list(super().get_items(block))

        return Recording


def render(page: Path) -> tuple[str, list[tuple[str, str, str]]]:
    """The page's HTML as the site's engine makes it, and the list items it made."""
    config = load_config(str(ROOT / "mkdocs.yml"))
    engine = markdown.Markdown(
        extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"]
    )
    items = _Items()
    parser = engine.parser.blockprocessors
    for name, base in (("olist", OListProcessor), ("ulist", UListProcessor)):
        priority = next(p.priority for p in parser._priority if p.name == name)
        parser.register(items.processor(base)(engine.parser), name, priority)
    return engine.convert(page.read_text()), items.seen


FENCE = re.compile(r"^(\s*)(```+)\s*(\S*)\s*$")


def fenced_blocks(page: Path) -> list[str]:
    """The content of each fenced block of the source, as a reader sees it."""
    blocks, current, indent = [], None, ""
    for line in page.read_text().splitlines():
        match = FENCE.match(line)
        if match and current is None:
            current, indent = [], match.group(1)
        elif match and match.group(1) == indent and not match.group(3):
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line[len(indent) :] if line.startswith(indent) else line)
    assert current is None, f"{relative(page)}: an unclosed fence"
    return blocks


def code_blocks(rendered: str) -> list[str]:
    return [
        html.unescape(m).rstrip("\n")
        for m in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.S)
    ]


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_fenced_block_renders_as_that_block(page: Path) -> None:
    """An unclosed fence, text after a fence, or a fence the engine does not take (indented
    in a list item) leaves the code out of a code block, or the prose in one."""
    rendered, _ = render(page)
    assert code_blocks(rendered) == [b.rstrip("\n") for b in fenced_blocks(page)]


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_list_item_is_of_its_lists_kind(page: Path) -> None:
    """A bullet list's item is a line starting with -, * or +; a numbered list's, with a
    number: a line of a bullet item that starts with "0." is a new item of that list."""
    _, items = render(page)
    wrong = [
        line for tag, marker, line in items if (tag == "ol") != bool(re.fullmatch(r"\d+\.", marker))
    ]
    assert wrong == [], f"{relative(page)}: lines the site made list items of another kind"


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_no_list_or_table_is_left_as_text(page: Path) -> None:
    """A list (or table) right after a paragraph's line, without a blank line, is that
    paragraph's text on the site (GitHub shows a list)."""
    rendered, _ = render(page)
    paragraphs = re.findall(r"<p>(.*?)</p>", rendered, re.S)
    left = [
        p[:120]
        for p in paragraphs
        if re.search(r"(^|\n)\s*([-*+]|\d+\.) |(^|\n)\s*\|.*\|\s*($|\n)", p)
    ]
    assert left == [], f"{relative(page)}: lists or tables rendered as text"


def test_the_checks_see_what_they_check() -> None:
    """The pages have lists and code blocks for the checks above to look at."""
    items = [item for page in PAGES for item in render(page)[1]]
    assert len(items) > 50
    assert sum(len(fenced_blocks(page)) for page in PAGES) > 20


def test_a_number_at_a_lines_start_in_a_bullet_item_is_caught() -> None:
    """The check above fails on the fault it is for (docs/cli.md had it: "...and exits\\n0.
    Deletes carry..." rendered as an item "Deletes carry")."""
    page = ROOT / "docs" / "_probe.md"
    try:
        page.write_text("- one\n- dry run: it deletes nothing and exits\n0. Deletes carry\n")
        _, items = render(page)
    finally:
        page.unlink()
    assert ("ul", "0.", "0. Deletes carry") in items
