"""Every snippet has a test named after it, and that test uses it."""

import ast
import importlib
from pathlib import Path

from harness.launch import ROOT, SNIPPETS


def snippet_files():
    return [p for p in sorted(SNIPPETS.rglob("*"))
            if p.is_file() and p.suffix != ".out" and "__pycache__" not in p.parts]


def mirror_test(path: Path) -> Path:
    """tests/<chapter>/test_<name>.py for snippets/<chapter>/<name>.<any suffix>."""
    return ROOT / "tests" / path.parent.relative_to(SNIPPETS) / f"test_{path.stem}.py"


def test_there_are_snippets():
    assert snippet_files()


def test_every_snippet_has_a_test_that_names_it():
    missing = []
    for path in snippet_files():
        rel = path.relative_to(SNIPPETS)
        test = mirror_test(path)
        if not test.is_file():
            missing.append(f"{rel}: no {test.relative_to(ROOT)}")
        elif rel.as_posix() not in test.read_text():
            missing.append(f"{rel}: {test.relative_to(ROOT)} never names it")
    assert not missing, "\n".join(missing)


def test_every_captured_output_belongs_to_a_snippet():
    orphans = []
    for out in sorted(SNIPPETS.rglob("*.out")):
        stem = out.name.split(".")[0]
        if not any(p.stem == stem and p.suffix != ".out" for p in out.parent.iterdir()):
            orphans.append(str(out.relative_to(ROOT)))
    assert not orphans, orphans


def test_snippet_lines_fit_the_page():
    """Lines of at most 88 characters show without scrolling sideways."""
    long = [f"{p.relative_to(ROOT)}:{n}" for p in snippet_files()
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 88]
    assert not long, long


#: Snippets without a GPU test of their own, and why.
NO_GPU_TEST = {"slurm/gpu_tests.sbatch": "it is the job that runs the GPU tests"}


def multigpu_tests(test: Path) -> list[set[str]]:
    """For each multigpu test of the file: the strings it names, directly or through a
    module constant."""
    module = importlib.import_module(".".join(test.relative_to(ROOT).with_suffix("").parts))
    tree = ast.parse(test.read_text())
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    tests = []
    for node in tree.body:
        marks = getattr(getattr(module, getattr(node, "name", ""), None), "pytestmark", [])
        if isinstance(node, ast.FunctionDef) and any(m.name == "multigpu" for m in marks):
            tests.append({inner.value if isinstance(inner, ast.Constant) else constants[inner.id]
                          for inner in ast.walk(node)
                          if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
                          or isinstance(inner, ast.Name) and inner.id in constants})
    return tests


def test_every_snippet_has_a_gpu_test():
    """So that one run of snippets/slurm/gpu_tests.sbatch on a GPU node proves every page.
    Where a script and its job script share a test file, a GPU test must name the job script."""
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
                               + (" names it" if tests else ""))
    assert not missing, "\n".join(missing)
