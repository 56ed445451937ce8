"""CONTRIBUTING.md lists every rule that the tests and the build enforce, each with its fix,
in one place: the "Rule: ... Fix: ..." paragraphs of the docstrings (of a module, class or
function) in conftest.py, docs/_ext/, harness/ and tests/. Adding a rule is one such
paragraph, then

    .venv/bin/python -m tests.test_contributing

rewrites the list. Also the commands it gives for an edit: ``make new-lesson``,
``make check`` and the refusals of ``make outputs`` and ``make releases``.
"""

import ast
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness.launch import ROOT, snippet
from tests.slurm.started_by import read_by
from tools.new_lesson import add_to_toctree

CONTRIBUTING = ROOT / "CONTRIBUTING.md"
SOURCES = ("conftest.py", "docs/_ext", "harness", "tests")
BEGIN = "<!-- The rules, from the tests' docstrings: python -m tests.test_contributing -->\n"
END = "<!-- End of the rules -->\n"
RULE = re.compile(r"Rule: (.+?) Fix: (.+)")
FIX = "run `.venv/bin/python -m tests.test_contributing` to rewrite it"


def rules(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(rule, fix, where) for each "Rule: ... Fix: ..." paragraph of a docstring, file by
    file."""
    found = []
    for path in sorted(path for source in map(root.joinpath, SOURCES)
                       for path in ([source] if source.is_file() else source.rglob("*.py"))):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                continue
            where = path.relative_to(root).as_posix() + (
                f"::{node.name}" if hasattr(node, "name") else "")
            for paragraph in (ast.get_docstring(node) or "").split("\n\n"):
                text = " ".join(paragraph.split())
                if m := RULE.fullmatch(text):
                    found.append((m[1], m[2], where))
                elif text.startswith("Rule:"):
                    raise ValueError(f"{where}: a Rule: paragraph ends with Fix: and the "
                                     "command or change that fixes a violation")
    return found


def listing(found: list[tuple[str, str, str]]) -> str:
    """The Markdown list of the rules, wrapped at 90 columns."""
    return "".join(textwrap.fill(f"- {rule} Fix: {fix} (`{where}`)", 90,
                                 subsequent_indent="  ", break_on_hyphens=False,
                                 break_long_words=False) + "\n" for rule, fix, where in found)


def section(text: str) -> str:
    """What CONTRIBUTING.md lists between its markers."""
    assert BEGIN in text and END in text, f"CONTRIBUTING.md lacks its markers: {BEGIN}"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_contributing_lists_every_rule():
    """Rule: CONTRIBUTING.md lists every rule of the docstrings, as they say it. Fix: run
    `.venv/bin/python -m tests.test_contributing`, which rewrites the list."""
    found = rules()
    assert len(found) >= 5
    assert section(CONTRIBUTING.read_text()) == listing(found), f"CONTRIBUTING.md: {FIX}"


def test_a_new_rule_is_found_and_a_stale_list_fails(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'def test_x():\n    """Checks x.\n\n    Rule: Lines are\n    short. Fix: wrap them.\n'
        '    """\n')
    found = rules(tmp_path)
    assert found == [("Lines are short.", "wrap them.", "tests/test_x.py::test_x")]
    (tmp_path / "tests" / "test_y.py").write_text("'Rule: Lines are short.'\n")
    with pytest.raises(ValueError, match="test_y.py: a Rule: paragraph ends with Fix:"):
        rules(tmp_path)
    stale = f"# Maintaining\n\n{BEGIN}{listing(found[:0])}{END}"
    assert section(stale) != listing(found)


def test_a_function_a_test_calls_renamed_in_its_snippet_names_the_file_and_the_fix(
        tmp_path, monkeypatch):
    """Not a bare KeyError from the test's helper: which name, which file, what to do."""
    renamed = tmp_path / "train.py"
    renamed.write_text(snippet("slurm/train.py").read_text().replace(
        "def launcher_env(", "def env_of_the_launcher("))
    with pytest.raises(AssertionError, match=r"train\.py defines no launcher_env\(\), which "
                       r"tests/slurm/started_by\.py calls: rename it back"):
        read_by(str(renamed), "srun", monkeypatch)
    assert read_by("slurm/train.py", "srun", monkeypatch) == (1, 2, 1)


def make(*args: str) -> subprocess.CompletedProcess:
    """What ``make -n ARGS`` would run (or its refusal), whatever make runs this test."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ARGS", "SNIPPET")}
    return subprocess.run(["make", "-n", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)


def test_make_outputs_and_releases_refuse_without_a_selection_in_one_line():
    for target in ("outputs", "releases"):
        refused = make(target, "PYTEST_ARGS=")
        assert refused.returncode == 2 and refused.stdout == "", refused
        assert refused.stderr.count("\n") == 1 and "needs PYTEST_ARGS=" in refused.stderr
        chosen = make(target, "PYTEST_ARGS=tests/ddp/test_train.py")
        assert chosen.returncode == 0 and "tests/ddp/test_train.py" in chosen.stdout


def test_make_check_recaptures_then_records_then_builds_then_checks_the_pages():
    """A run that recaptures outputs records no release (harness/releases.py): the
    recording run comes after, and compares with the new outputs."""
    steps = make("check", "SNIPPET=troubleshooting/divergence.py").stdout.splitlines()
    test = "tests/troubleshooting/test_divergence.py"
    order = [next(i for i, line in enumerate(steps) if all(w in line for w in words))
             for words in (("UPDATE_OUTPUTS=1", test), ("--record-releases", test),
                           ("sphinx-build",), ("pytest", "tests/site"))]
    assert order == sorted(order), steps
    assert len([s for s in steps if "pytest" in s or "sphinx-build" in s]) == 4, steps
    refused = make("check", "SNIPPET=troubleshooting/no_such.py")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused


def test_a_new_lesson_goes_last_in_its_chapters_table_of_contents():
    index = "```{toctree}\nbasics/a\nbasics/b\n```\n\n```{toctree}\nddp/c\n```\n"
    assert add_to_toctree(index, "basics", "new") == index.replace("b\n", "b\nbasics/new\n")
    with pytest.raises(SystemExit, match="no table of contents with nothing/ pages"):
        add_to_toctree(index, "nothing", "new")


if __name__ == "__main__":
    text = CONTRIBUTING.read_text()
    CONTRIBUTING.write_text(text.replace(BEGIN + section(text) + END,
                                         BEGIN + listing(rules()) + END))
    print(f"CONTRIBUTING.md lists {len(rules())} rules")
