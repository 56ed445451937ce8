"""What a reader reads on a page, through the parsers the site already uses.

In the build, from a page's doctree (the extension ``lesson`` calls these): its words of
prose, its lines of unfolded code and the minutes both take; a lesson over the reading
budget fails the build.

Without a build, from the Markdown as MyST's own markdown-it parser reads it: the glossary
terms a page uses before it links them. tests/site/test_pages.py holds every page to that
rule; this script lists and fixes what it finds:

    python3 docs/_ext/reading.py docs/ddp/*.md           # list first uses not linked
    python3 docs/_ext/reading.py --link docs/ddp/x.md    # make each a {term} link

``--link`` makes the first unlinked use of each term a link to the glossary, the words
unchanged (review the result: a use in another sense, such as a compiler's "backend", is
better reworded).
"""

import ast
import functools
import math
import re
import sys
from pathlib import Path

from docutils import nodes

#: Most words of prose a lesson may have ("about 1,200").
BUDGET = 1250
#: Reading speeds for the minutes: words of technical prose, and lines of code, a minute.
WORDS_PER_MINUTE = 180
CODE_LINES_PER_MINUTE = 25
WORD = re.compile(r"[A-Za-z0-9][\w'’.,-]*")
DOCS = Path(__file__).resolve().parents[1]

# ---- In the build: the doctree ----

#: Nodes that are code or machinery, not prose; the site's own by class name: the box of
#: how a page was tested (snippets.py) and the table of lessons (lesson.py); and by their
#: HTML class, diagrams (docs/_diagrams) and snippets' download links.
NOT_READ = (nodes.literal, nodes.math, nodes.math_block, nodes.raw, nodes.comment,
            nodes.caption, nodes.image)
MACHINERY = {"toctree", "glossary", "tested_box", "tested_marker", "lesson_table",
             "download_reference"}
NOT_READ_CLASSES = {"diagram", "snippet-download"}


def _folded(node) -> bool:
    """Content a reader opens only if they want to: dropdowns and solutions."""
    return "dropdown" in node.get("classes", ()) or node.get("design_component") == "dropdown"


def _read(node, folded=False, found=None) -> dict:
    """Words of prose and lines of code under node: {"words": n, "code": n}."""
    found = found if found is not None else {"words": 0, "code": 0}
    for child in node.children:
        if isinstance(child, nodes.Text):
            found["words"] += 0 if folded else len(WORD.findall(child.astext()))
        elif isinstance(child, nodes.literal_block):
            found["code"] += 0 if folded else len(child.astext().splitlines())
        elif isinstance(child, NOT_READ) or type(child).__name__ in MACHINERY \
                or child.get("not_prose") or NOT_READ_CLASSES & set(child.get("classes", ())):
            continue
        elif child.tagname == "pending_xref" and child.get("reftype") != "term":
            continue  # a cross-reference ({doc}, {ref}): a link, not words to read
        else:
            _read(child, folded or _folded(child), found)
    return found


def words(doctree) -> int:
    """Words of prose, headings and titles included, code and folded parts not."""
    return _read(doctree)["words"]


def minutes(doctree) -> int:
    """Minutes to read the page, its prose and its unfolded code, in steps of 5."""
    found = _read(doctree)
    time = found["words"] / WORDS_PER_MINUTE + found["code"] / CODE_LINES_PER_MINUTE
    return max(5, 5 * math.ceil(time / 5))


# ---- Without a build: the Markdown, as MyST's markdown-it parser reads it ----

#: Directives whose content is code or machinery, not prose, and the box of how a page
#: was tested, which is not the lesson.
NOT_PROSE = {"snippet", "snippet-output", "code-block", "code", "literalinclude", "diagram",
             "toctree", "lesson-table", "glossary", "how-tested", "math", "raw", "csv-table",
             "list-table", "centre-summary", "centre-keys"}
#: Directives whose content the reader may skip.
FOLDED = {"dropdown", "solution"}
#: Directives whose argument is a title (not text that uses a term).
TITLED = {"exercise", "solution", "dropdown", "admonition", "tab-item", "grid-item-card",
          "figure"}
DIRECTIVE = re.compile(r"^\{(?P<name>[\w-]+)\}\s*(?P<arg>.*)$")


@functools.cache
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    conf = (DOCS / "conf.py").read_text()  # the extensions the site's parser has
    found = re.search(r"^myst_enable_extensions = (.*)$", conf, re.M)
    extensions = set(ast.literal_eval(found[1])) if found else set()
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def _body(content: str) -> tuple[str, int]:
    """A directive's content without its options (``:name: value`` lines or a ``---``
    block), and how many lines those took."""
    lines = content.split("\n")
    skip = 0
    if lines and lines[0].strip() == "---":
        skip = next((i + 1 for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
    while skip < len(lines) and re.match(r"^\s*:[\w-]+:", lines[skip]):
        skip += 1
    return "\n".join(lines[skip:]), skip


def blocks(markdown: str, line: int = 1, folded: bool = False):
    """(kind, first line, inline token or title text) for each run of text on the page,
    kind "prose", "folded", "heading" or "title"; directives' content read as MyST reads
    it, code and machinery left out."""
    heading = False
    for token in _parser().parse(markdown):
        if token.type == "heading_open":
            heading = True
        elif token.type == "heading_close":
            heading = False
        elif token.type == "inline":
            kind = "heading" if heading else "folded" if folded else "prose"
            yield kind, line + token.map[0], token
        elif token.type in ("fence", "colon_fence"):
            directive = DIRECTIVE.match(token.info.strip())
            if directive is None or directive["name"] in NOT_PROSE:
                continue  # a code block, or machinery
            name, arg = directive["name"], directive["arg"].strip()
            if arg and name in TITLED:
                yield "title", line + token.map[0], arg
            body, skipped = _body(token.content)
            yield from blocks(body, line + token.map[0] + 1 + skipped, folded or name in FOLDED)


def _plain(token) -> list[tuple[str, int, str | None]]:
    """An inline token as (text, line offset, term it links or None) pieces: inline code and
    other roles as blanks, a figure from a run as one word, links as their text."""
    pieces, offset, at = [], 0, 0
    for child in token.children or []:
        if child.type in ("softbreak", "hardbreak"):
            pieces.append(("\n", offset, None))
        elif child.type == "text":  # its line: where it is in the paragraph's source
            found = token.content.find(child.content, at)
            if found >= 0:
                at, offset = found + len(child.content), token.content.count("\n", 0, found)
            pieces.append((child.content, offset, None))
        elif child.type == "myst_role" and child.meta.get("name") == "term":
            target = re.search(r"<([^>]*)>$", child.content)
            term = (target[1] if target else child.content).strip()
            pieces.append((" " * len(child.content), offset, term))
        elif child.type == "myst_role" and child.meta.get("name") == "from-run":
            pieces.append(("N", offset, None))
        elif child.content:
            pieces.append((" " * len(child.content), offset, None))
    return pieces


def lines_of_text(markdown: str) -> list[tuple[int, str]]:
    """(line, plain text) of every line of prose, headings, titles and folded text."""
    found = []
    for _, line, token in blocks(markdown):
        if isinstance(token, str):
            found.append((line, token))
            continue
        text = "".join(piece for piece, _, _ in _plain(token))
        found.extend((line + i, part) for i, part in enumerate(text.split("\n")))
    return found


def glossary_terms(glossary: str) -> list[str]:
    """The terms a glossary page defines: the unindented lines of its glossary directive."""
    for token in _parser().parse(glossary):
        if token.type in ("fence", "colon_fence") and token.info.strip() == "{glossary}":
            return [line.strip() for line in _body(token.content)[0].splitlines()
                    if line and not line[0].isspace()]
    return []


@functools.cache
def _pattern(term: str) -> re.Pattern:
    words_ = r"[\s-]+".join(re.escape(w) for w in term.split())
    flags = 0 if term != term.lower() else re.IGNORECASE  # NCCL, DDP, DTensor as written
    return re.compile(rf"(?<![\w-]){words_}(?:s|es)?\d*(?!\w)", flags)


def unlinked_terms(markdown: str, terms: list[str]) -> list[tuple[str, int]]:
    """(term, line) for each glossary term whose first use in the page's prose is not a
    {term} link to it. Headings, titles, code and the tested box do not count."""
    text, starts, linked = "", [], {}
    for kind, line, token in blocks(markdown):
        if kind not in ("prose", "folded"):
            continue
        for piece, offset, term in _plain(token):
            starts.append((len(text), line + offset))
            if term:
                linked.setdefault(term.lower(), len(text))
            text += piece
        text += "\n"
    found = []
    for term in sorted(terms, key=len, reverse=True):  # "local rank" before "rank"
        match = _pattern(term).search(text)
        text = _pattern(term).sub(lambda m: " " * len(m[0]), text)
        if match is None:
            continue
        first_link = linked.get(term.lower())
        if first_link is None or match.start() < first_link:
            line = [number for start, number in starts if start <= match.start()][-1]
            found.append((term, line))
    return sorted(found, key=lambda item: item[1])


ROLE = re.compile(r"\{[\w-]+\}`[^`]*`")


def link_first_uses(markdown: str, terms: list[str]) -> str:
    """The page with each glossary term's first unlinked use made a {term} link: the words
    stay as they were, now linked (``{term}`ranks <rank>```)."""
    lines = markdown.splitlines(keepends=True)
    for term, number in unlinked_terms(markdown, terms):
        line = lines[number - 1]  # mask what is not prose on the line, and longer terms
        masked = re.sub(r"`[^`]*`|\]\([^)]*\)", lambda m: " " * len(m[0]), ROLE.sub(
            lambda m: " " * len(m[0]), line))
        for longer in [t for t in terms if len(t) > len(term)]:
            masked = _pattern(longer).sub(lambda m: " " * len(m[0]), masked)
        found = _pattern(term).search(masked)
        if found is None:
            continue
        text = found[0]
        role = f"{{term}}`{text}`" if text.lower() == term.lower() else f"{{term}}`{text} <{term}>`"
        lines[number - 1] = line[:found.start()] + role + line[found.end():]
    return "".join(lines)


def fix_command(page: Path | str) -> str:
    """The command that links a page's terms: error messages name it."""
    return f".venv/bin/python docs/_ext/reading.py --link {page}"


def main(paths: list[str]) -> int:
    terms = glossary_terms((DOCS / "glossary.md").read_text())
    link = paths[:1] == ["--link"]
    status = 0
    for name in paths[1:] if link else paths:
        if Path(name).name == "glossary.md":
            continue
        text = Path(name).read_text()
        if link:
            text = link_first_uses(text, terms)
            Path(name).write_text(text)
        for term, line in unlinked_terms(text, terms):
            print(f"{name}:{line}: first use of '{term}' is not a {{term}} link")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
