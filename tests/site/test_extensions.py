"""The Sphinx extensions in docs/_ext: snippet include, download and coverage; lesson table."""

import io
import json
import re
import sys
from html import unescape
from pathlib import Path

import pytest

from harness import torch_versions
from harness.launch import ROOT

try:
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace
except ImportError:  # a GPU machine's own Python, say: skipped, and no half-imported
    for name in [m for m in sys.modules if m.split(".")[0] == "sphinx"]:
        del sys.modules[name]  # package left behind (SciPy's docstrings look for it)
    pytest.skip("needs Sphinx (requirements.txt)", allow_module_level=True)

sys.path.insert(0, str(ROOT / "docs" / "_ext"))

CONF = 'extensions = ["myst_parser", "lesson", "snippets"]\nsnippets_dir = "../snippets"\n'


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def build(tmp_path: Path, pages: dict[str, str], snippets: dict[str, str], conf: str = CONF):
    src, out = tmp_path / "docs", tmp_path / "out"
    write(src, {"conf.py": conf, **pages})
    write(tmp_path / "snippets", snippets)
    warnings = io.StringIO()
    with docutils_namespace():  # as sphinx-build: what a build registers goes with it
        app = Sphinx(src, src, out, out / ".doctrees", "html", status=None,
                     warning=warnings, freshenv=True)
        app.build()
    return warnings.getvalue(), out


def records(tmp_path: Path, versions: dict, snippets: dict[str, str]) -> str:
    """The data file of ``{snippet: {release: outcome}}``, each record made for the
    snippet's text in ``snippets`` (written where build() writes them)."""
    write(tmp_path / "snippets", snippets)
    content = {s: torch_versions.content(s, tmp_path / "snippets") for s in versions}
    return json.dumps({s: {r: {"outcome": o, "content": content[s]} for r, o in rel.items()}
                       for s, rel in versions.items()})


INDEX = "# Home\n\n```{lesson-table}\n```\n\n```{toctree}\npage\n```\n"
PAGE = ("# A page\n\n```{objectives}\n- Read a script.\n```\n\n```{snippet} ch/used.py\n```\n\n"
        "```{snippet-output} ch/used.out\n```\n")


def test_snippets_are_included_downloadable_and_listed(tmp_path):
    warnings, out = build(tmp_path, {"index.md": INDEX, "page.md": PAGE},
                          {"ch/used.py": "print('hi')\n", "ch/used.out": "hi\n"})
    assert warnings == ""
    html = (out / "page.html").read_text()
    assert re.search(r'<a class="reference download[^>]*href="_downloads/\w+/used\.py"', html)
    assert list(out.glob("_downloads/*/used.py"))
    index = (out / "index.html").read_text()
    assert "A page" in index and ">5<" in index  # computed: the least a lesson takes


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
    page = "# Notebook\n\n```{snippet} ch/nb.ipynb\n```\n"
    versions = records(tmp_path, {"ch/nb.ipynb": {"2.13.0": "passed"}},
                       {"ch/nb.ipynb": NOTEBOOK})
    warnings, out = build(tmp_path, {"index.md": INDEX, "page.md": page,
                                     "_data/torch_versions.json": versions},
                          {"ch/nb.ipynb": NOTEBOOK})
    # shown and offered: the coverage check is satisfied (a second Sphinx in one process
    # warns about nodes registered twice, which is not this test's business)
    assert "nb.ipynb" not in warnings and "ipython3" not in warnings, warnings
    html = (out / "page.html").read_text()
    assert "nb.ipynb, cell 1" in html and "cell 2" not in html  # code cells only
    assert "torchrun" in html and "# Title" not in html
    assert list(out.glob("_downloads/*/nb.ipynb"))


TORCH_PAGE = ("# Two scripts\n\nText.\n\n```{snippet} ch/old.py\n```\n\n"
              "```{snippet} ch/new.py\n```\n\n```{snippet} ch/plain.sh\n```\n\n"
              "```{how-tested}\nRun on two CPUs.\n```\n")
TORCH_SNIPPETS = {"ch/old.py": "import torch\n", "ch/new.py": "import torch\n",
                  "ch/plain.sh": "echo hi\n"}
VERSIONS = {"ch/old.py": {"2.4.1": "passed", "2.6.0": "passed", "2.13.0": "passed",
                          "2.15.0": "failed"},
            "ch/new.py": {"2.4.1": "failed", "2.6.0": "failed", "2.8.0": "passed",
                          "2.13.0": "passed", "2.15.0": "passed"}}


def test_each_snippet_and_page_show_the_tested_releases(tmp_path):
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "torch"),
                                     "torch.md": TORCH_PAGE,
                                     "_data/torch_versions.json":
                                         records(tmp_path, VERSIONS, TORCH_SNIPPETS)},
                          TORCH_SNIPPETS)
    # (a second Sphinx in one process warns that its node classes are registered already)
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    html = (out / "torch.html").read_text()
    # one collapsed box, under the title, before the text: the page's words, then each
    # script's releases (old.py failed on 2.15.0, new.py on 2.6.0; none for plain.sh)
    assert html.count('<details class="how-tested">') == 1
    box = re.search(r'<details class="how-tested">(.*?)</details>', html, re.S)[1]
    box = re.sub(r"<[^>]+>|\s+", " ", box)
    assert "How this page was tested (PyTorch 2.8.0 to 2.13.0)" in box
    assert re.search(r"Run on two CPUs\. .* old\.py: PyTorch 2\.4\.1 to 2\.13\.0 .* "
                     r"new\.py: PyTorch 2\.8\.0 to 2\.15\.0 ", box), box
    assert "plain.sh" not in box
    assert "The scripts on this page have not run on GPUs yet." in box  # no record of GPU runs
    text = re.sub(r"<[^>]+>|\s+", " ", html)
    assert text.index("Two scripts") < text.index("How this page") < text.index("Text.")
    assert "Tested with" not in text and text.count("Run on two CPUs") == 1  # nowhere else


def test_each_page_says_which_of_its_scripts_ran_on_gpus(tmp_path):
    run = {"date": "2026-11-26", "gpus": "1 × NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130",
           "passed": 2, "failed": 0, "skipped": 1}
    gpu_runs = {"ch/old.py": run, "ch/new.py": {**run, "failed": 1}}  # new.py failed there
    _, out = build(tmp_path, {"index.md": INDEX.replace("page", "torch"), "torch.md": TORCH_PAGE,
                              "_data/torch_versions.json":
                                  records(tmp_path, VERSIONS, TORCH_SNIPPETS),
                              "_data/gpu_runs.json": json.dumps(gpu_runs)}, TORCH_SNIPPETS)
    text = re.sub(r"<[^>]+>|\s+", " ", (out / "torch.html").read_text())
    assert ("Run on GPUs: old.py on 1 × NVIDIA H100 80GB HBM3 with PyTorch 2.11.0+cu130 "
            "(2026-11-26). The other script has not run on GPUs yet.") in text  # one: new.py


@pytest.mark.parametrize("paths, ran, expected", [
    (["a.py"], [], "The script on this page has not run on GPUs yet."),
    (["a.py", "b.py"], [], "The scripts on this page have not run on GPUs yet."),
    (["a.py", "b.py", "c.py"], ["a.py"], "Run on GPUs: a.py on 1 × H100 with PyTorch 2.11.0 "
                                         "(2026-11-26). The other scripts have not run on "
                                         "GPUs yet."),
])
def test_the_gpu_sentence_counts_the_scripts_it_names(tmp_path, paths, ran, expected):
    """One script is "the script", several "the scripts", in the box's sentence on GPU
    runs as in the one on releases above it."""
    from types import SimpleNamespace
    from snippets import gpu_text
    run = {"date": "2026-11-26", "gpus": "1 × H100", "torch": "2.11.0", "passed": 1,
           "failed": 0, "skipped": 0}
    (tmp_path / "gpu_runs.json").write_text(json.dumps({name: run for name in ran}))
    env = SimpleNamespace(srcdir=str(tmp_path), note_dependency=lambda path: None,
                          config=SimpleNamespace(snippets_gpu_runs="gpu_runs.json"))
    assert gpu_text(env, paths) == expected


def test_a_snippet_without_tested_releases_fails_the_build(tmp_path):
    versions = {k: v for k, v in VERSIONS.items() if k != "ch/new.py"}
    warnings, _ = build(tmp_path, {"index.md": INDEX.replace("page", "torch"),
                                   "torch.md": TORCH_PAGE,
                                   "_data/torch_versions.json":
                                       records(tmp_path, versions, TORCH_SNIPPETS)},
                        TORCH_SNIPPETS)
    errors = [line for line in warnings.splitlines() if "ERROR" in line]
    assert len(errors) == 1, warnings  # one error, which -W (the Makefile's) makes fatal
    assert re.search(r"has no tested PyTorch release for the content now of ch/new\.py "
                     r"\(on torch\): make check SNIPPET=ch/new\.py", errors[0])


def test_an_edited_snippet_shows_only_the_releases_it_passed_since(tmp_path):
    """The page claims no release for content that did not run on it: new.py, edited,
    passed on 2.13.0 since; old.py's edit is a comment, which keeps its records."""
    data = json.loads(records(tmp_path, VERSIONS, TORCH_SNIPPETS))
    edited = {**TORCH_SNIPPETS, "ch/new.py": "import torch\nprint(torch.ones(1))\n",
              "ch/old.py": "# [start]\nimport torch  # the library\n"}
    data["ch/new.py"]["2.13.0"] = json.loads(records(
        tmp_path, {"ch/new.py": {"2.13.0": "passed"}}, edited))["ch/new.py"]["2.13.0"]
    _, out = build(tmp_path, {"index.md": INDEX.replace("page", "torch"), "torch.md": TORCH_PAGE,
                              "_data/torch_versions.json": json.dumps(data)}, edited)
    box = re.search(r'<details class="how-tested">(.*?)</details>',
                    (out / "torch.html").read_text(), re.S)[1]
    box = re.sub(r"<[^>]+>|\s+", " ", box)
    assert "How this page was tested (PyTorch 2.13.0)" in box  # 2.8.0 to 2.13.0 before
    assert re.search(r"old\.py: PyTorch 2\.4\.1 to 2\.13\.0 .* new\.py: PyTorch 2\.13\.0 ",
                     box), box


def run_page(sentence: str) -> str:
    return f"# Run\n\n{sentence}\n\n```{{snippet-output}} ch/used.out\n```\n"


def test_a_sentence_takes_its_figure_from_the_run(tmp_path):
    page = run_page(r"The job ran {from-run}`ch/used.out: ^world size (\d+)` processes.")
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "run"), "run.md": page},
                          {"ch/used.out": "loss 0.5\nworld size 8 (gloo on cpu)\n"})
    assert "no line of" not in warnings, warnings
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "run.html").read_text()))
    assert "The job ran 8 processes." in text


def test_a_stale_sentence_fails_the_build(tmp_path):
    """The run now prints another line: the sentence's pattern no longer matches, and the
    build says so (an error with -W, as the Makefile builds)."""
    page = run_page(r"The job ran {from-run}`ch/used.out: ^world size (\d+)` processes.")
    warnings, _ = build(tmp_path, {"index.md": INDEX.replace("page", "run"), "run.md": page},
                        {"ch/used.out": "loss 0.5\n8 processes (gloo on cpu)\n"})
    assert re.search(r"run\.md:3: WARNING: from-run: no line of ch/used\.out matches "
                     r"'\^world size \(\\\\d\+\)' with one group", warnings), warnings


@pytest.mark.parametrize("body, problem", [
    ("Text. " * 1260, "126[0-9] words of prose, over the budget of 1250"),
    ("Text. " * 1200 + "\n\n```python\n" + "x = 1\n" * 300 + "```\n", None),  # code: minutes
])
def test_a_lesson_keeps_to_its_budget(tmp_path, body, problem):
    """The budget counts the doctree's prose; glossary links are a rule of the pages'
    tests (tests/site/test_pages.py), not of the build."""
    page = f"# Lesson\n\n```{{objectives}}\n- Read.\n```\n\n{body}\n"
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "lesson"),
                                     "lesson.md": page}, {})
    if problem:
        assert re.search(rf"lesson\.md(:\d+)?: WARNING: {problem}", warnings), warnings
    else:
        assert "lesson.md" not in warnings, warnings
        assert ">20<" in (out / "index.html").read_text()  # 1,205 words and 300 lines of code


def test_a_page_whose_scripts_share_no_release_gives_their_span_by_script():
    import snippets

    ranges = {"a.py": ("2.4.1", "2.6.0"), "b.py": ("2.8.0", "2.13.0")}
    assert snippets._page_range(ranges) == "PyTorch 2.4.1 to 2.13.0, by script"
    assert snippets._page_range({"a.py": ("2.4.1", "2.13.0"), "b.py": ("2.8.0", "2.15.0")}) \
        == "PyTorch 2.8.0 to 2.13.0"


JOB = ("#!/bin/bash\n#SBATCH --job-name=job\n#>cluster gpus=node tasks=gpu\n#SBATCH --nodes=1\n"
       "#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-node=4\n#<cluster\nsrun hostname\n")


def test_a_job_script_is_shown_once_per_partition_of_the_profile(tmp_path):
    """For a profile with two GPU partitions, a tab each, the first partition's first,
    each with the script as the profile renders it for that partition and its download;
    for the default profile, one script."""
    profile = ROOT / "profiles" / "two_partitions.toml"
    page = ("# Jobs\n\n```{snippet} ch/job.sbatch\n```\n\n"
            "```{snippet} ch/job.sbatch\n:start-after: \"--job-name\"\n```\n")
    conf = (CONF.replace('"snippets"]', '"snippets", "sphinx_design"]')
            + f"centre = {str(profile)!r}\n")
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "jobs"), "jobs.md": page},
                          {"ch/job.sbatch": JOB}, conf)
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    html = (out / "jobs.html").read_text()
    labels = re.findall(r'<label[^>]*class="sd-tab-label"[^>]*>\s*(\S+)\s*</label>', html)
    assert labels == ["ml", "gpu2"] * 2  # the whole script, then an excerpt
    text = re.sub(r"<[^>]+>", "", html)
    assert text.index("--gpus-per-node=a100:4") < text.index("--gpus-per-node=v100:2")
    assert "--partition=gpu2" in text and "--partition=ml" not in text  # ml is the default
    assert text.count("#!/bin/bash") == 2  # the options reach each tab's excerpt
    downloads = sorted(p.read_text() for p in out.glob("_downloads/*/job.sbatch"))
    assert len(downloads) == 2 and "--partition=gpu2" in downloads[0] + downloads[1]


#: A profile whose second partition takes jobs of one node only.
SINGLE = (ROOT / "profiles" / "two_partitions.toml").read_text().replace(
    'description = "2 NVIDIA V100', 'max_nodes = 1\ndescription = "2 NVIDIA V100')


@pytest.mark.parametrize("partitions", [2, 1])
def test_a_job_for_more_nodes_than_a_partition_takes_is_a_sentence_in_its_tab(tmp_path,
                                                                            partitions):
    """The partition's tab says the job's nodes, the partition's limit and description,
    and where the job runs; with no partition to run it, it says so, and the script
    needs no download (it is shown as that sentence)."""
    written = SINGLE
    if partitions == 1:  # gpu2 alone
        second = '[[partitions]]\nname = "gpu2"'
        written = written[:written.index("[[partitions]]")] + written[written.index(second):]
    (tmp_path / "centre.toml").write_text(written)
    conf = (CONF.replace('"snippets"]', '"snippets", "sphinx_design"]')
            + f"centre = {str(tmp_path / 'centre.toml')!r}\n")
    job = JOB.replace("--nodes=1", "--nodes=2")
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "jobs"),
                                     "jobs.md": "# Jobs\n\n```{snippet} ch/job.sbatch\n```\n"},
                          {"ch/job.sbatch": job}, conf)
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "jobs.html").read_text()))
    limit = ("job.sbatch needs 2 nodes, but jobs on gpu2 (2 NVIDIA V100 per node, for "
             "smaller jobs and tests) use one node at most: ")
    downloads = list(out.glob("_downloads/*/job.sbatch"))
    if partitions == 2:
        assert limit + "run it on ml." in text
        assert text.index("--gpus-per-node=a100:4") < text.index(limit)
        assert len(downloads) == 1 and "--nodes=2" in downloads[0].read_text()
    else:
        assert limit + "no partition of Twin takes a job of 2 nodes." in text
        assert "#SBATCH" not in text and not downloads


def test_your_cluster_says_the_rules_of_each_partition(tmp_path):
    """Whole nodes, the memory a GPU job asks for and with which option, the most nodes,
    CPUs and memory of a node a job may have: for each partition that has them."""
    written = SINGLE.replace('description = "4 NVIDIA A100', 'exclusive = true\n'
                             'max_cpus_per_job = 28\nmem_per_node = "250000M"\n'
                             'description = "4 NVIDIA A100').replace(
        "max_nodes = 1", 'max_nodes = 1\nmem_option = "mem-per-gpu"')
    (tmp_path / "centre.toml").write_text(written)
    conf = (CONF.replace('"snippets"]', '"snippets", "centre"]')
            + f"centre = {str(tmp_path / 'centre.toml')!r}\n")
    warnings, out = build(tmp_path, {"index.md": INDEX.replace("page", "cluster"),
                                     "cluster.md": "# Your cluster\n\n```{centre-summary}\n```\n"},
                          {}, conf)
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    text = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (out / "cluster.html").read_text())))
    assert ("On ml, GPU jobs take whole nodes: the job scripts ask --exclusive; every GPU "
            "job asks for its memory, 62500M per GPU, with --mem (250000M for a whole node); "
            "a job may have at most 28 CPUs of a node and 250000M of a node\u2019s memory.") in text
    assert ("On gpu2, every GPU job asks for its memory, 30000M per GPU, with "
            "--mem-per-gpu; jobs use one node at most.") in text
    assert "Where a partition takes fewer nodes than a script asks for, its tab says so" in text


def test_an_excerpt_says_so_and_adds_no_second_download(tmp_path):
    script = "def step():\n    return 1\n\n\ndef main():\n    step()\n"
    page = ("# A page\n\n```{snippet} ch/used.py\n:pyobject: step\n```\n\n"
            "```{snippet} ch/used.py\n:start-at: def main\n:caption: used.py (main)\n```\n\n"
            "```{snippet} ch/used.py\n```\n\n```{snippet} ch/used.py\n:pyobject: main\n"
            ":caption: main()\n```\n")
    warnings, out = build(tmp_path, {"index.md": INDEX, "page.md": page},
                          {"ch/used.py": script})
    html = (out / "page.html").read_text()
    assert re.findall(r'class="caption-text">([^<]*)<', html) == [
        "Excerpt of used.py", "Excerpt of used.py (main)", "used.py", "Excerpt of main()"]
    assert html.count("reference download internal") == 1
    assert "the caption 'main()' of an excerpt of ch/used.py does not start with used.py" \
        in warnings


LOOK = (CONF.replace('"snippets"]', '"snippets", "centre"]')
        + 'html_theme = "sphinx_book_theme"\nhtml_title = "The guide"\n')


def look(tmp_path: Path, profile: str) -> str:
    """The home page of a small site built for ``profile`` with the guide's theme."""
    centre = "" if profile == "default" else str(ROOT / "profiles" / f"{profile}.toml")
    warnings, out = build(tmp_path / profile, {"index.md": "# Home\n\nText.\n"}, {},
                          LOOK + f"centre = {centre!r}\n")
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    return (out / "index.html").read_text()


def links(html: str, kind: str) -> list[tuple[str, str]]:
    """(url, text) of each link of the page header whose class names ``kind``."""
    header = html[html.index('class="article-header-buttons"'):]
    return re.findall(rf'<a href="([^"]+)"[^>]*\b{kind}\b[^>]*>\s*'
                      rf'<span class="btn__text-container">([^<]+)</span>', header)


def test_a_centres_site_has_its_title_logo_and_links_and_the_guides_has_none(tmp_path):
    """h100.toml's [site] title and logo, and links in the page header: its own
    link to its user guide (which is also its docs_url, so shown once) and its support
    page, as buttons on wide screens and in one menu on narrow ones; the default
    profile's build keeps the guide's title, and has no logo and no link."""
    html = look(tmp_path, "h100")
    assert "<title>Home &#8212; Distributed PyTorch on Hopper</title>" in html
    assert re.search(r'<img src="_static/h100-logo\.svg" class="logo__image', html)
    assert (tmp_path / "h100" / "out" / "_static" / "h100-logo.svg").is_file()
    assert '<p class="title logo__title">Distributed PyTorch on Hopper</p>' in html
    expected = [("https://hpc.example.org/docs", "Hopper user guide"),
                ("https://hpc.example.org/support", "Support")]
    assert links(html, "btn-centre-link") == expected
    assert re.search(r'class="dropdown dropdown-centre-links d-md-none">\s*<button '
                     r'[^>]*aria-label="Pages of Hopper"', html)
    assert links(html, "dropdown-item") == expected
    html = look(tmp_path, "default")
    assert "<title>Home &#8212; The guide</title>" in html
    assert "logo__image" not in html and "centre-link" not in html
    assert "Hopper" not in html


SOFTWARE_PAGES = {
    "index.md": "# Home\n\n```{toctree}\njobs\ncluster\nslurm/environment\n```\n",
    "slurm/environment.md": "# The software environment\n",
    "jobs.md": ("# Jobs\n\n```{snippet} ch/train.py\n```\n\n```{snippet} ch/uses.py\n```\n\n"
                "```{snippet} ch/new.py\n```\n\n```{snippet} ch/plain.py\n```\n\n"
                "```{how-tested}\nRun on two CPUs.\n```\n"),
    "cluster.md": "# Your cluster\n\n```{centre-summary}\n```\n",
}
SOFTWARE_SNIPPETS = {"ch/train.py": "import sklearn\nimport torch\n",
                     "ch/uses.py": "import torch\n\nimport train\n",  # train.py's sklearn
                     "ch/new.py": 'import torch\n\nNEEDS = "2.10"\n',
                     "ch/plain.py": "import torch\n"}
SOFTWARE_PROFILE = """[cluster]
name = "Testbed"
login_host = "login.testbed.example.org"

[[partitions]]
name = "gpu"
gpus_per_node = 4
cpus_per_gpu = 8
mem_per_gpu = "64G"

[environment]
setup = ["module load pytorch/2.8.0"]
modules = ["pytorch/2.8.0"]
torch = "2.8.0"
packages = ["numpy"]
"""


def software_site(tmp_path: Path, profile: str) -> tuple[str, dict[str, str]]:
    """Warnings and the text of each page of a small site built for ``profile``."""
    versions = {"ch/train.py": {"2.10.0": "passed", "2.13.0": "passed"},
                "ch/uses.py": {"2.10.0": "passed", "2.13.0": "passed"},
                "ch/new.py": {"2.10.0": "passed"}, "ch/plain.py": {"2.6.0": "passed"}}
    conf = (CONF.replace('"snippets"]', '"snippets", "centre"]')
            + f"centre = {profile!r}\n")
    warnings, out = build(tmp_path, {**SOFTWARE_PAGES, "_data/torch_versions.json":
                                     records(tmp_path, versions, SOFTWARE_SNIPPETS)},
                          SOFTWARE_SNIPPETS, conf)
    return warnings, {name: unescape(re.sub(r"\s+", " ", re.sub(
        r"<[^>]+>", "", (out / f"{name}.html").read_text()))) for name in ("jobs", "cluster")}


def test_a_script_the_centres_environment_cannot_run_has_a_note_and_is_listed(tmp_path):
    """For a profile whose environment gives PyTorch 2.8.0 with numpy: a note under each
    script it cannot run (the sentence and the change), none under the script it can; a
    script that needs what a note above on the page adds says only what differs; the box
    names 2.8.0 beside the range and why each script cannot run, without brackets in
    brackets; the Your cluster page lists the scripts with a link to their page. The
    default profile shows none of this."""
    profile = tmp_path / "testbed.toml"
    profile.write_text(SOFTWARE_PROFILE)
    warnings, pages = software_site(tmp_path / "testbed", str(profile))
    assert not [w for w in warnings.splitlines() if "already registered" not in w], warnings
    jobs = pages["jobs"]
    assert jobs.count("On Testbed") == 3
    assert ("train.py imports scikit-learn, which the environment of Testbed does not "
            "provide. Make a virtual environment on top of the module that adds it") in jobs
    assert ("module load pytorch/2.8.0 python -m venv --system-site-packages .venv python -c "
            "\"import site, sysconfig;") in jobs
    assert (".venv/bin/python -m pip install scikit-learn Then add source .venv/bin/activate "
            "to the job script that runs it, after its module lines, and write python -m "
            "torch.distributed.run for torchrun: torchrun starts its processes with the "
            "Python it runs under, which may be the Python of the module, and that one does "
            "not see .venv. The "
            "software environment says more.") in jobs
    assert ("uses.py needs scikit-learn (for train.py), which the environment of Testbed "
            "does not provide. With the virtual environment of the note under train.py, add "
            "source .venv/bin/activate to the job script that runs it, after its module "
            "lines, and write python -m torch.distributed.run for torchrun. new.py") in jobs
    assert jobs.count("pip install scikit-learn") == 1
    assert ("new.py needs PyTorch ≥ 2.10; the environment of Testbed gives 2.8.0. Use a "
            "module with PyTorch 2.10 or newer, if Testbed has one: put its module load lines "
            "in place of those of the job script that runs it. Otherwise use a virtual "
            "environment with PyTorch 2.10 or newer: in place of the module lines, load only "
            "the modules it was made with (not a PyTorch module), then source "
            ".venv/bin/activate (The software environment).") in jobs
    assert jobs.index("plain.py¶") > jobs.rindex("On Testbed")  # nothing under plain.py
    assert "How this page was tested (PyTorch 2.6.0 to 2.13.0, by script; Testbed gives " \
           "2.8.0)" in jobs
    assert ("The environment of Testbed gives PyTorch 2.8.0: the tests of plain.py have not "
            "run with it yet; it cannot run train.py (imports scikit-learn), uses.py (needs "
            "scikit-learn for train.py) and new.py (needs PyTorch ≥ 2.10) as they are.") in jobs
    assert ("This environment gives PyTorch 2.8.0, with numpy. It cannot run these 3 scripts of the guide as they are; a note under each, "
            "on its page, says what to change: train.py (Jobs): imports scikit-learn "
            "uses.py (Jobs): needs scikit-learn for train.py "
            "new.py (Jobs): needs PyTorch ≥ 2.10 Where things go") in pages["cluster"]
    _, pages = software_site(tmp_path / "default", "")
    assert "On " not in pages["jobs"] and "gives" not in pages["jobs"]
    assert "cannot run" not in pages["cluster"]
