"""The Sphinx extensions in docs/_ext: snippet include, download and coverage; lesson table."""

import io
import re
import sys
from pathlib import Path

import pytest
from sphinx.application import Sphinx

from harness.launch import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))

CONF = 'extensions = ["myst_parser", "lesson", "snippets"]\nsnippets_dir = "../snippets"\n'


def build(tmp_path: Path, pages: dict[str, str], snippets: dict[str, str]):
    src, out = tmp_path / "docs", tmp_path / "out"
    for name, text in {"conf.py": CONF, **pages}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    for name, text in snippets.items():
        (tmp_path / "snippets" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "snippets" / name).write_text(text)
    warnings = io.StringIO()
    app = Sphinx(src, src, out, out / ".doctrees", "html", status=None, warning=warnings,
                 freshenv=True)
    app.build()
    return warnings.getvalue(), out


INDEX = "# Home\n\n```{lesson-table}\n```\n\n```{toctree}\npage\n```\n"
PAGE = "---\nminutes: 7\n---\n# A page\n\n```{snippet} ch/used.py\n```\n\n```{snippet-output} ch/used.out\n```\n"


def test_snippets_are_included_downloadable_and_listed(tmp_path):
    warnings, out = build(tmp_path, {"index.md": INDEX, "page.md": PAGE},
                          {"ch/used.py": "print('hi')\n", "ch/used.out": "hi\n"})
    assert warnings == ""
    html = (out / "page.html").read_text()
    assert re.search(r'<a class="reference download[^>]*href="_downloads/\w+/used\.py"', html)
    assert list(out.glob("_downloads/*/used.py"))
    index = (out / "index.html").read_text()
    assert "A page" in index and ">7<" in index


@pytest.mark.parametrize("page, problem", [
    (PAGE.replace("```{snippet} ch/used.py\n```\n", ""), "snippets/ch/used.py is not shown on any page"),
    (PAGE.replace("{snippet} ch/used.py", "{literalinclude} ../snippets/ch/used.py"),
     "snippets/ch/used.py is not offered for download"),
    (PAGE.replace("```{snippet-output} ch/used.out\n```\n", ""), "snippets/ch/used.out is not shown"),
    (PAGE.replace("ch/used.out", "ch/missing.out"), "missing.out' not found"),
])
def test_unused_or_missing_files_warn(tmp_path, page, problem):
    warnings, _ = build(tmp_path, {"index.md": INDEX, "page.md": page},
                        {"ch/used.py": "print('hi')\n", "ch/used.out": "hi\n"})
    assert problem in warnings


NOTEBOOK = ('{"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},'
            ' {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,'
            ' "source": ["!torchrun --standalone train.py\\n", "x = 1"]}],'
            ' "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')


def test_a_notebook_shows_its_code_cells_and_is_offered_and_counted_as_shown(tmp_path):
    page = "---\nminutes: 3\n---\n# Notebook\n\n```{snippet} ch/nb.ipynb\n```\n"
    warnings, out = build(tmp_path, {"index.md": INDEX, "page.md": page},
                          {"ch/nb.ipynb": NOTEBOOK})
    # shown and offered: the coverage check is satisfied (a second Sphinx in one process
    # warns about nodes registered twice, which is not this test's business)
    assert "nb.ipynb" not in warnings and "ipython3" not in warnings, warnings
    html = (out / "page.html").read_text()
    assert "nb.ipynb, cell 1" in html and "cell 2" not in html  # code cells only
    assert "torchrun" in html and "# Title" not in html
    assert list(out.glob("_downloads/*/nb.ipynb"))
