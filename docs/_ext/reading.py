"""What a reader reads on a page: its prose, its code, the minutes both take, and the
glossary terms it uses before linking them.

The Sphinx extension ``lesson`` computes each lesson's minutes and enforces the reading
budget and the glossary links with these functions; tests/site/test_reading.py holds the
real pages to the same rules without a build. Run it on pages to see where they stand:

    python3 docs/_ext/reading.py docs/quickstart.md docs/ddp/*.md

With ``--link`` first, it also makes the first unlinked use of each term on each page a
link to the glossary, the words unchanged (review the result: a use in another sense,
such as a compiler's "backend", is better reworded).
"""

import functools
import math
import re
import sys
from pathlib import Path

#: Most words of prose a lesson may have ("about 1,200").
BUDGET = 1250
#: Reading speeds for the minutes: words of technical prose, and lines of code, a minute.
WORDS_PER_MINUTE = 180
CODE_LINES_PER_MINUTE = 25

#: Directives whose content is code or machinery, not prose (snippets, diagrams, tables of
#: contents) and the generated box of how a page was tested, which is not the lesson.
NOT_PROSE = {"snippet", "snippet-output", "code-block", "code", "literalinclude", "diagram",
             "toctree", "lesson-table", "glossary", "how-tested", "math", "raw", "csv-table",
             "list-table"}
#: Directives whose content the reader may skip: it counts as neither prose nor code.
FOLDED = {"dropdown", "solution"}
#: Directives whose argument is a title (not counted as text that uses a term).
TITLED = {"exercise", "solution", "dropdown", "admonition", "tab-item", "grid-item-card",
          "figure"}

FENCE = re.compile(r"^\s*(?P<mark>`{3,}|:{3,})\s*(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[\w-]+)\}\s*(?P<arg>.*)$")
OPTION = re.compile(r"^\s*:[\w-]+:")


class Part:
    """A run of lines of one kind: "prose", "heading", "title", "code", "snippet" (a file to
    count), "folded" or "skip"."""

    def __init__(self, kind: str, text: str, line: int):
        self.kind, self.text, self.line = kind, text, line
        self.options: dict[str, str] = {}  # a snippet's: :lines:, :start-at:, :pyobject: ...


def parts(markdown: str) -> list[Part]:
    """The page cut into parts, fences nested as MyST nests them."""
    lines = markdown.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":  # front matter
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
        start = end + 1
    result: list[Part] = []
    stack: list[tuple[str, str]] = []  # (fence mark, kind of its content)

    def kind_now() -> str:
        kinds = [kind for _, kind in stack]
        for kind in ("skip", "code", "folded"):
            if kind in kinds:
                return kind
        return "prose"

    for number in range(start, len(lines)):
        line = lines[number]
        fence = FENCE.match(line)
        top = stack[-1][0] if stack else None
        if fence and top and fence["mark"][0] == top[0] and len(fence["mark"]) >= len(top) \
                and not fence["info"].strip():
            stack.pop()  # the end of the innermost fence
            continue
        if fence and kind_now() not in ("code", "skip"):
            info = fence["info"].strip()
            directive = DIRECTIVE.match(info)
            if directive is None:  # a code block (```python, ```console ...)
                stack.append((fence["mark"], "code"))
                continue
            name, arg = directive["name"], directive["arg"]
            if name in ("snippet", "snippet-output"):
                where = "folded" if kind_now() == "folded" else "snippet"
                included = Part(where, arg.strip(), number + 1)
                result.append(included)
                stack.append((fence["mark"], "skip"))
            elif name in NOT_PROSE:
                stack.append((fence["mark"], "skip"))
            elif name in FOLDED:
                if arg:
                    result.append(Part("title", arg, number + 1))
                stack.append((fence["mark"], "folded"))
            else:
                if arg and name in TITLED:
                    result.append(Part("title", arg, number + 1))
                stack.append((fence["mark"], "prose"))
            continue
        kind = kind_now()
        option = re.match(r"^\s*:([\w-]+):\s*(.*)$", line)
        if kind == "skip" and option and result and result[-1].kind in ("snippet", "folded") \
                and result[-1].line == number - len(result[-1].options):
            result[-1].options[option[1]] = option[2]
            continue
        if kind == "prose" and OPTION.match(line):
            continue
        if kind == "prose" and re.match(r"^\s*#{1,6}\s", line):
            kind = "heading"
        if kind == "prose" and re.match(r"^\s*\(.*\)=\s*$", line):  # a label
            continue
        result.append(Part(kind, line, number + 1))
    return result


ROLE = re.compile(r"\{(?P<role>[\w-]+)\}`(?P<body>[^`]*)`")


def plain(line: str) -> str:
    """A line of prose as words to read: inline code and cross-references dropped, links and
    glossary terms as their text, a figure from a run as one word."""
    def role(match):
        name, body = match["role"], match["body"]
        if name == "from-run":
            return "N"
        text = re.sub(r"\s*<[^>]*>$", "", body)
        return text if name in ("term", "abbr") else ""
    line = ROLE.sub(role, line)
    line = re.sub(r"`[^`]*`", "", line)
    line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)
    return line


def words(markdown: str) -> int:
    """Words of prose, headings and titles included, code and folded parts not."""
    return sum(len(re.findall(r"[A-Za-z0-9][\w'’.,-]*", plain(p.text)))
               for p in parts(markdown) if p.kind in ("prose", "heading", "title"))


def code_lines(markdown: str, snippets: Path) -> int:
    """Lines of code the page shows unfolded: code blocks and included snippets."""
    total = 0
    for part in parts(markdown):
        if part.kind == "code":
            total += 1
        elif part.kind == "snippet":
            path = snippets / part.text
            if path.is_file() and path.suffix != ".ipynb":
                total += len(shown(path, part.options).splitlines())
    return total


def shown(path: Path, options: dict[str, str]) -> str:
    """The part of a file a snippet directive shows, as Sphinx's literalinclude cuts it
    (:lines:, :start-at:, :end-before:, :pyobject: ...)."""
    from types import SimpleNamespace

    from sphinx.directives.code import LiteralIncludeReader

    wanted = {k: v.strip().strip("'\"") for k, v in options.items()
              if k in ("lines", "pyobject", "start-at", "start-after", "end-at", "end-before")}
    whole = path.read_text(errors="replace")
    if not wanted:
        return whole
    try:
        text, _ = LiteralIncludeReader(str(path), wanted,
                                       SimpleNamespace(source_encoding="utf-8")).read()
    except ValueError:  # not found: the build says so; count the whole file here
        return whole
    return text


def minutes(markdown: str, snippets: Path) -> int:
    """Minutes to read the page, its prose and its unfolded code, in steps of 5."""
    time = words(markdown) / WORDS_PER_MINUTE + code_lines(markdown, snippets) / CODE_LINES_PER_MINUTE
    return max(5, 5 * math.ceil(time / 5))


def glossary_terms(glossary: str) -> list[str]:
    """The terms a glossary page defines: the unindented lines of its glossary directive."""
    found, inside = [], False
    for line in glossary.splitlines():
        if re.match(r"^`{3,}\{glossary\}", line):
            inside = True
        elif inside and line.startswith("```"):
            break
        elif inside and line and not line[0].isspace() and not line.startswith(":"):
            found.append(line.strip())
    return found


@functools.cache
def _pattern(term: str) -> re.Pattern:
    words_ = r"[\s-]+".join(re.escape(w) for w in term.split())
    flags = 0 if term != term.lower() else re.IGNORECASE  # NCCL, DDP, DTensor as written
    return re.compile(rf"(?<![\w-]){words_}(?:s|es)?\d*(?!\w)", flags)


def unlinked_terms(markdown: str, terms: list[str]) -> list[tuple[str, int]]:
    """(term, line) for each glossary term whose first use in the page's prose is not a
    {term} link to it. Headings, titles, code and the tested box do not count."""
    text, lines = "", []
    for part in parts(markdown):
        if part.kind in ("prose", "folded"):
            text += part.text + "\n"
            lines.append((len(text), part.line))
    linked: dict[str, int] = {}

    def link(match):
        target = re.search(r"<([^>]*)>$", match["body"])
        name = (target[1] if target else match["body"]).strip().lower()
        linked.setdefault(name, match.start())
        return " " * len(match[0])

    masked = ROLE.sub(lambda m: link(m) if m["role"] == "term" else " " * len(m[0]), text)
    masked = re.sub(r"`[^`]*`", lambda m: " " * len(m[0]), masked)
    masked = re.sub(r"\]\([^)]*\)", lambda m: " " * len(m[0]), masked)  # link targets
    found = []
    for term in sorted(terms, key=len, reverse=True):  # "local rank" before "rank"
        match = _pattern(term).search(masked)
        masked = _pattern(term).sub(lambda m: " " * len(m[0]), masked)
        if match is None:
            continue
        first_use = match.start()
        first_link = linked.get(term.lower())
        if first_link is None or first_use < first_link:
            line = next((number for end, number in lines if first_use < end), 0)
            found.append((term, line))
    return sorted(found, key=lambda item: item[1])


def link_first_uses(markdown: str, terms: list[str]) -> str:
    """The page with each glossary term's first unlinked use made a {term} link: the words
    stay as they were, now linked (``{term}`ranks <rank>```)."""
    lines = markdown.splitlines(keepends=True)
    for term, number in unlinked_terms(markdown, terms):
        line = lines[number - 1]
        masked = ROLE.sub(lambda m: " " * len(m[0]), line)
        masked = re.sub(r"`[^`]*`|\[[^\]]*\]\([^)]*\)", lambda m: " " * len(m[0]), masked)
        for longer in sorted(terms, key=len, reverse=True):
            if len(longer) <= len(term):
                break
            masked = _pattern(longer).sub(lambda m: " " * len(m[0]), masked)
        found = _pattern(term).search(masked)
        if found is None:
            continue
        text = found[0]
        role = f"{{term}}`{text}`" if text.lower() == term.lower() else f"{{term}}`{text} <{term}>`"
        lines[number - 1] = line[:found.start()] + role + line[found.end():]
        markdown = "".join(lines)
    return "".join(lines)


def main(paths: list[str]) -> int:
    docs = Path(__file__).resolve().parents[1]
    terms = glossary_terms((docs / "glossary.md").read_text())
    status = 0
    link = paths[:1] == ["--link"]
    for name in paths[1:] if link else paths:
        text = Path(name).read_text()
        if link and Path(name).name != "glossary.md":
            text = link_first_uses(text, terms)
            Path(name).write_text(text)
        count = words(text)
        over = count > BUDGET
        print(f"{name}: {count} words of prose{' (over ' + str(BUDGET) + ')' if over else ''}, "
              f"{code_lines(text, docs.parent / 'snippets')} lines of code, "
              f"{minutes(text, docs.parent / 'snippets')} minutes")
        missing = [] if Path(name).name == "glossary.md" else unlinked_terms(text, terms)
        for term, line in missing:
            print(f"  line {line}: first use of '{term}' is not a {{term}} link")
        status |= over or bool(missing)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
