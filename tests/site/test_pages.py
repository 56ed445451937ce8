"""The pages as a reader meets them, checked without a build, through MyST's own Markdown
parser (docs/_ext/reading.py): each glossary term linked where a page first uses it,
minutes never typed (the build computes them, and holds each lesson to its reading
budget: docs/_ext/lesson.py), and how the page was tested said in its box only."""

import re
import sys
from pathlib import Path

import pytest

from harness.launch import ROOT

pytest.importorskip("myst_parser", reason="needs MyST (requirements.txt)")
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import reading  # noqa: E402

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not {"_build", "_data"} & set(p.parts))
LESSONS = [p for p in PAGES if "{objectives}" in p.read_text()]
TERMS = reading.glossary_terms((DOCS / "glossary.md").read_text())
#: Pages for the administrator who runs the guide's tests on a cluster: there, the tests
#: are the lesson.
ABOUT_THE_TESTS = {"slurm/gpu_tests.md", "slurm/profile_reference.md", "slurm/your_cluster.md"}
#: Sentences that explain how the guide's own tests checked something.
TEST_TALK = re.compile(r"\b(harness|test suite|tests? of (this|the) guide|the guide's tests|"
                       r"this test|the tests? (assert|check|run|show|prove)s?|CI|Tested with)\b",
                       re.IGNORECASE)


def name(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def test_there_are_lessons_and_terms():
    assert len(LESSONS) > 40 and len(TERMS) > 20


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "glossary.md"], ids=name)
def test_each_glossary_term_is_linked_where_the_page_first_uses_it(page):
    """Rule: A page makes each glossary term (`docs/glossary.md`) a `{term}` link where
    its prose first uses it (headings, titles, code and the how-tested box do not count).
    Fix: `.venv/bin/python docs/_ext/reading.py --link docs/<chapter>/<page>.md`, then
    review the links it made."""
    unlinked = [f"line {line}: {term}"
                for term, line in reading.unlinked_terms(page.read_text(), TERMS)]
    assert not unlinked, (f"first uses not linked to the glossary ({'; '.join(unlinked)}): "
                          f"run {reading.fix_command(page.relative_to(ROOT))}")


def test_the_glossary_defines_the_terms_the_pages_need():
    assert {"rank", "local rank", "world size", "process group", "backend", "NCCL", "gloo",
            "rendezvous", "c10d", "collective", "shard", "DTensor", "device mesh"} <= set(TERMS)


def test_no_page_types_its_minutes():
    """Rule: No page types its reading time: the build computes it from the page's prose
    and code. Fix: delete the `minutes:` line of the page's front matter."""
    assert [name(p) for p in PAGES if re.match(r"---\n(.*\n)*?minutes:", p.read_text())] == []


@pytest.mark.parametrize("page", [p for p in LESSONS if name(p) not in ABOUT_THE_TESTS], ids=name)
def test_the_lesson_speaks_of_the_lesson(page):
    """How the page was tested goes in its how-tested box, which reading leaves out."""
    text = page.read_text()
    talk = [f"line {line}: {words.strip()}" for line, words in reading.lines_of_text(text)
            if TEST_TALK.search(words)]
    assert talk == []
    assert text.count("{how-tested}") <= 1


def test_the_checks_find_what_they_look_for():
    """Each rule fails on a page that breaks it."""
    page = ("# P\n\n```{objectives}\n- x\n```\n\nEach rank prints; the tests check it.\n\n"
            "```{how-tested}\nThe tests ran it with 2 ranks.\n```\n")
    assert reading.unlinked_terms(page, TERMS) == [("rank", 7)]
    assert [line for line, words in reading.lines_of_text(page) if TEST_TALK.search(words)] == [7]
    linked = page.replace("Each rank", "Each {term}`rank`")
    assert reading.unlinked_terms(linked, TERMS) == []
    assert reading.link_first_uses(page, TERMS) == linked
    later = page.replace("Each rank prints", "Each rank prints, each {term}`rank`")
    assert reading.unlinked_terms(later, TERMS) == [("rank", 7)]  # linked after its first use
    inside = page.replace("```{how-tested}",
                          "```{exercise} Ranks\nWhich rank?\n```\n\n```{how-tested}")
    assert reading.unlinked_terms(inside.replace("Each rank", "Each"), TERMS) == [("rank", 10)]


#: A console block right before an output (nothing but blank lines between them).
CONSOLE_THEN_OUTPUT = re.compile(r"```console\n((?:(?!```).)*)```\s*\n```\{snippet-output\} (\S+)",
                                 re.S)


def shown_twice(text: str) -> list[str]:
    """The outputs of a page that a console block introduces with a command of the same
    script: the output shows its command itself, from its file (harness/outputs.py)."""
    found = []
    for block, output in CONSOLE_THEN_OUTPUT.findall(text):
        script = Path(output).name.split(".")[0]
        if re.search(rf"(?m)^\$ .*\b{re.escape(script)}\.(py|sbatch|sh)\b", block):
            found.append(output)
    return found


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_an_output_shows_its_own_command(page):
    """A command typed on the page above an output could say one thing while the output
    came from another; the output's first lines are the command that printed it."""
    assert not shown_twice(page.read_text())


def test_a_command_above_its_output_is_found():
    page = ("Run it:\n\n```console\n$ torchrun --standalone --nproc_per_node=2 train.py\n```\n\n"
            "```{snippet-output} ddp/train.out\n```\n")
    assert shown_twice(page) == ["ddp/train.out"]
    assert not shown_twice(page.replace("train.py", "other.py"))
    assert not shown_twice(page.replace("```\n\n```{snippet", "```\n\nIt prints:\n\n```{snippet"))
