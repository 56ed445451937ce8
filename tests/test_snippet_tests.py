"""Every snippet has a test named after it, and that test uses it."""

import ast
import importlib
import re
from pathlib import Path

import pytest

from harness import software, torch_versions
from harness.launch import ROOT, SNIPPETS
from harness.mirror import mirror_test, snippet_files


def test_there_are_snippets():
    assert snippet_files()


def test_every_snippet_has_a_test_that_names_it():
    """Rule: Every snippet `snippets/<chapter>/<name>.*` has a test file
    `tests/<chapter>/test_<name>.py` that names it (`"<chapter>/<name>.py"`). Fix: `make
    new-lesson CHAPTER=<chapter> NAME=<name>` writes a snippet with its test and page."""
    missing = []
    for path in snippet_files():
        rel = path.relative_to(SNIPPETS)
        test = mirror_test(path)
        if not test.is_file():
            missing.append(f"{rel}: no {test.relative_to(ROOT)} (make new-lesson writes "
                           "one to start from)")
        elif rel.as_posix() not in test.read_text():
            missing.append(f"{rel}: {test.relative_to(ROOT)} never names it: run it there "
                           f'with run("{rel.as_posix()}", ...)')
    assert not missing, "\n".join(missing)


def test_every_captured_output_belongs_to_a_snippet():
    """Rule: Every captured output `<name>.out` (or `<name>.<variant>.out`) sits beside
    its snippet `<name>.*`. Fix: delete the outputs of a snippet you removed or renamed,
    then `make check SNIPPET=<chapter>/<name>.py` captures the new ones."""
    orphans = []
    for out in sorted(SNIPPETS.rglob("*.out")):
        stem = out.name.split(".")[0]
        if not any(p.stem == stem and p.suffix != ".out" for p in out.parent.iterdir()):
            orphans.append(str(out.relative_to(ROOT)))
    assert not orphans, f"outputs of no snippet (delete them): {orphans}"


def test_snippet_lines_fit_the_page():
    """Lines of at most 88 characters show without scrolling sideways.

    Rule: No line of a snippet is longer than 88 characters. Fix: wrap the lines the
    failure lists."""
    long = [f"{p.relative_to(ROOT)}:{n}" for p in snippet_files()
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 88]
    assert not long, f"wrap these lines at 88 characters: {long}"


#: Snippets without a GPU test of their own, and why.
NO_GPU_TEST = {"slurm/gpu_tests.sbatch": "it is the job that runs the GPU tests",
               "recipes/silent_job_buffered.sbatch": "Python's buffering, which GPUs do not "
                                                     "change; its script runs on GPUs in "
                                                     "test_silent_job.py"}


def runs_on_gpus(marks, gpus: int | None = None) -> bool:
    """Marked multigpu (``multigpu(gpus)``, when given), or parametrised with a case that
    is (tests.devices.on_each_device)."""
    def gpu_mark(mark):
        return mark.name == "multigpu" and gpus in (None, mark.args[0])

    return any(gpu_mark(m) or m.name == "parametrize" and any(
        gpu_mark(mark) for case in m.args[1] for mark in getattr(case, "marks", ()))
        for m in marks)


def multigpu_tests(test: Path, gpus: int | None = None) -> list[set[str]]:
    """For each multigpu test of the file (that needs ``gpus``, when given): the strings
    it names, directly or through a module constant."""
    module = importlib.import_module(".".join(test.relative_to(ROOT).with_suffix("").parts))
    tree = ast.parse(test.read_text())
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    tests = []
    for node in tree.body:
        marks = getattr(getattr(module, getattr(node, "name", ""), None), "pytestmark", [])
        if isinstance(node, ast.FunctionDef) and runs_on_gpus(marks, gpus):
            tests.append({inner.value if isinstance(inner, ast.Constant) else constants[inner.id]
                          for inner in ast.walk(node)
                          if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
                          or isinstance(inner, ast.Name) and inner.id in constants})
    return tests


def test_every_snippet_has_a_gpu_test():
    """So that one run of snippets/slurm/gpu_tests.sbatch on a GPU node proves every page.
    Where a script and its job script share a test file, a GPU test must name the job script.

    Rule: Every snippet has a test that also runs on GPUs: decorated with
    `@on_each_device(gpus=2)` (`tests/devices.py`) or marked `multigpu(n)`; a job script
    that shares its script's test file is named in one. Fix: decorate the test as
    `make new-lesson`'s test is, or list the snippet in `NO_GPU_TEST` with the reason."""
    by_test: dict[Path, list[Path]] = {}
    for path in snippet_files():
        if path.relative_to(SNIPPETS).as_posix() not in NO_GPU_TEST:
            by_test.setdefault(mirror_test(path), []).append(path)
    missing = []
    for test, paths in by_test.items():
        if not test.is_file():
            continue  # no test at all: the test above fails
        tests = multigpu_tests(test)
        for path in paths:
            rel = path.relative_to(SNIPPETS).as_posix()
            shares = len(paths) > 1 and path.suffix != ".py"  # the job script of a .py
            if not tests or shares and not any(rel in named for named in tests):
                missing.append(f"{rel}: no multigpu test in {test.relative_to(ROOT)}"
                               + (" names it" if tests else "") + ": decorate one with "
                               "@on_each_device(gpus=2) (tests/devices.py)")
    assert not missing, "\n".join(missing)


#: Python scripts without a one-GPU case, and why.
NO_ONE_GPU_CASE = {
    "memory/fsdp2_tuning.py": "compares settings that differ only with 2 or more ranks: "
                              "at world size 1 it stops with one line",
    "model_parallel/clip_2d.py": "a 2 x 2 mesh: 4 processes",
    "model_parallel/clip_pipeline.py": "2 pipeline stages, one per process",
    "model_parallel/hybrid_2d.py": "a 2 x 2 mesh: 4 processes",
    "model_parallel/hybrid_3d.py": "a 2 x 2 x 2 mesh: 8 processes",
    "model_parallel/naive.py": "one process on 2 GPUs; with one GPU it stays on the CPU",
    "model_parallel/pipeline_bubble.py": "idle time between stages: one stage per process",
    "model_parallel/pipeline_interleaved.py": "idle time between 2 processes, 2 stages each",
    "model_parallel/pipeline_manual.py": "2 pipeline stages, one per process",
    "model_parallel/pipeline_traced.py": "2 pipeline stages, one per process",
    "performance/message_passing.py": "sends between pairs of ranks: an even number of them",
    "slurm/whereami.py": "imports no PyTorch: prints what the launcher set",
    "tools/estimate_memory.py": "the standard library alone: runs no model",
}


def test_every_script_that_runs_as_one_process_has_a_one_gpu_case():
    """So that one GPU for a few minutes (tools/gpu-check) runs every script's CUDA path.

    Rule: Every Python snippet has a one-GPU case: `@on_each_device(gpus=2,
    one_gpu=True)`, with `device.ranks(n)` processes. Fix: add `one_gpu=True` (`make
    rehearse` runs the case on the CPU), or list the script in `NO_ONE_GPU_CASE` with
    the reason."""
    missing = [f"{rel}: no multigpu(1) test in {mirror_test(path).relative_to(ROOT)}: "
               "add one_gpu=True to its @on_each_device and start device.ranks(n) processes"
               for path in snippet_files() if path.suffix == ".py"
               and (rel := path.relative_to(SNIPPETS).as_posix()) not in NO_ONE_GPU_CASE
               and not multigpu_tests(mirror_test(path), gpus=1)]
    assert not missing, "\n".join(missing)


def guards() -> dict[str, str]:
    """{snippet: the release its guard asks for} for every Python snippet with a guard:
    its first lines say NEEDS = "2.8" (harness.software.NEEDS finds it), then a check
    stops the script with one line on an older release."""
    return {p.relative_to(SNIPPETS).as_posix(): m[1] for p in snippet_files()
            if p.suffix == ".py" and (m := software.NEEDS.search(p.read_text()))}


#: Scripts whose range starts later than the release they need, and why.
NEEDS_LESS = {
    "memory/fsdp1.py": "its test compares it with fsdp2.py, which needs 2.10 on CPUs; "
                       "FSDP1 itself runs on older releases, the page's advice for them",
    "memory/dcp_to_torch.py": "its test converts the checkpoint dcp_checkpoint.py writes, "
                              "which needs 2.10; the conversion itself is older",
    "memory/memory_snapshot.py": "it runs from 2.10 on; its output, the profiler's byte "
                                 "counts, differs between releases",
    "basics/ranks.py": "it runs on 2.4 too, but its test of two torchruns hung on 2.4 in "
                       "four runs of nine after every rank had printed (a torchrun did "
                       "not exit); it has not hung on the releases of its range",
    "ddp/elastic.py": "it restarts and resumes bit for bit on 2.4 too; torchrun 2.4's "
                      "report of the crash, which the test reads, names the other rank",
    "performance/no_sync.py": "its test hung at exit on 2.4 in one run of six: 2.4's gloo "
                              "process group joins its threads holding the GIL while one "
                              "releases the counting hook's Python callback (py-spy)",
    "troubleshooting/crash.py": "it crashes as intended on every release; torchrun's report "
                                "of the crash, which the test reads, changed in 2.13",
}


def test_a_script_that_failed_on_an_older_release_asks_for_the_oldest_that_passed():
    """A Python snippet whose tests failed on a release older than its tested range
    (docs/_data/torch_versions.json, the records made for its content now) has a guard;
    a guard lets no release run the script on which its tests failed, and refuses none in
    its tested range: what the page says and what the script checks agree (NEEDS_LESS
    lists the exceptions and why). Between the two, releases with no record for the
    content now (such as one that can no longer be installed) are untested, not failed.

    Rule: A Python snippet whose tests failed on a release older than its range starts
    with `NEEDS = "X.Y"`, newer than every release it failed on and no newer than the first
    of its range. Fix: add or correct its `NEEDS` line, or list it in `NEEDS_LESS` with
    the reason."""
    data = torch_versions.current()
    claims, found = torch_versions.claims(data), guards()
    key = torch_versions.key
    problems = []
    for snippet, releases in sorted(data.items()):
        claim = claims.get(snippet)
        if not snippet.endswith(".py") or claim is None or snippet in NEEDS_LESS:
            continue
        failed = [r for r, state in releases.items()
                  if state == "failed" and key(r) < key(claim)]
        needs = found.get(snippet)
        if needs is None:
            if failed:
                problems.append(f"{snippet}: failed on {', '.join(failed)}, has no NEEDS guard")
        elif key(needs) > key(claim):
            problems.append(f"{snippet}: NEEDS = \"{needs}\" refuses {claim}, where its "
                            f"range starts")
        elif allowed := [r for r in failed if key(r) >= key(needs)]:
            problems.append(f"{snippet}: NEEDS = \"{needs}\" lets {', '.join(allowed)} run "
                            f"it, where its tests failed")
    assert not problems, "\n".join(problems)


#: A page's note on the release a script needs: "`x.py` needs PyTorch 2.8 or newer",
#: and after it, in the same sentence, "`y.py` 2.10".
NEEDS_NOTE = re.compile(r"`(\w+\.py)`(?: needs PyTorch)? (\d+\.\d+)\b")


def test_a_page_names_the_release_its_script_asks_for():
    """A page that says which release a script needs names the script's own NEEDS.

    Rule: A page's "`x.py` needs PyTorch 2.8" names the release of the script's `NEEDS`
    line. Fix: change the page or the script's `NEEDS` so that they agree."""
    found = {Path(snippet).name: needs for snippet, needs in guards().items()}
    notes = [(page.relative_to(ROOT), script, release)
             for page in sorted((ROOT / "docs").rglob("*.md"))
             for line in page.read_text().splitlines() if " needs PyTorch " in line
             for script, release in NEEDS_NOTE.findall(line)]
    wrong = [f"{page}: {script} needs {release}, its NEEDS is {found.get(script)}"
             for page, script, release in notes if found.get(script) != release]
    assert notes and not wrong, "\n".join(wrong)


@pytest.mark.older_torch
@pytest.mark.parametrize("script", sorted(guards()))
def test_on_an_older_pytorch_a_guarded_script_stops_at_once_with_one_line(script):
    """Started on a release older than its guard asks for (the oldest one any snippet
    claims, or this session's), the script prints one line and exits 2 before it
    imports anything the old release lacks."""
    needs = guards()[script]
    result = torch_versions.run_on_older(script, needs=needs)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert re.fullmatch(rf"this script needs PyTorch >= {re.escape(needs)} "
                        rf"\(found {re.escape(result.release)}(\+\w+)?\)\n",
                        result.stderr), result.stderr


def test_ports_derived_from_the_job_id_stay_below_the_ephemeral_range():
    """A port `A + SLURM_JOB_ID % M` stays below 32768, where Linux picks the ports of
    outgoing connections (one of which may hold it: EADDRINUSE, seen in CI at 33268).

    Rule: A port `A + SLURM_JOB_ID % M` in a snippet stays below 32768. Fix: lower `A`
    or `M` in the snippet."""
    found = [(p.relative_to(SNIPPETS).as_posix(), int(a) + int(m) - 1)
             for p in snippet_files()
             for a, m in re.findall(r"(\d+) \+ SLURM_JOB_ID % (\d+)", p.read_text())]
    assert found and all(top < 32768 for _, top in found), (
        f"(snippet, highest port): lower A or M where it is 32768 or more: {found}")


def test_a_test_names_the_page_that_shows_its_snippet():
    """A test's docstring that says on which page its snippet is shown is right: a maintainer
    goes from the test to the page in one step, also after a page is split.

    Rule: A test file whose docstring starts "snippets/<file>, shown on docs/<page>.md"
    names a page that shows that file. Fix: name the page that shows it now."""
    wrong = []
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        named = re.match(r'"""snippets/(\S+?)[,:]?(?: and [^,]*?)?,?\s+(?:shown\s+)?on\s+(docs/\S+?\.md)',
                         test.read_text())
        if named is None:
            continue
        page = ROOT / named[2]
        if not page.is_file() or named[1] not in page.read_text():
            wrong.append(f"{test.relative_to(ROOT)}: {named[2]} does not show {named[1]}")
    assert not wrong, "\n".join(wrong)
