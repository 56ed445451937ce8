"""How the harness is built (CONTRIBUTING.md, "How the harness is built"): no import
circle, a core that imports none of the optional parts, and the line counts that section
states. The section is the one list of the parts: this test reads it."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch import LAUNCHER_MODULES, LAUNCHERS, ROOT

SECTION = "## How the harness is built"
#: The functions of the core that may import an optional part, inside the function: the
#: core runs without that part until a test asks for what only it knows.
BOUNDARY_FUNCTIONS = {("harness.outputs", "rendered_for_another_centre"): "harness.profile"}
#: How far a stated line count may be from the files' (in %).
SLACK = 5


# --- The import graph ---------------------------------------------------------------------

def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path, known: set[str]) -> list[tuple[str, str | None]]:
    """(module, function) of each import of ``path`` that names a module of ``known``:
    function None at module level. A module beside ``path`` may be imported by its bare
    name, as the Sphinx extensions import each other."""
    this = module_name(path, root)
    here = this.rpartition(".")[0]

    def resolve(name: str) -> str | None:
        if here and f"{here}.{name}" in known:
            return f"{here}.{name}"
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name
            names = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names = [f"{child.module}.{alias.name}" for alias in child.names]
            for name in names:
                target = resolve(name)
                if target and target != this:
                    found.append((target, function))
            visit(child, inner)

    visit(ast.parse(path.read_text()), None)
    return found


def graph(files: list[Path], root: Path) -> dict[str, list[tuple[str, str | None]]]:
    """Each module's imports of the others: module -> [(module, function or None)]."""
    known = {module_name(f, root) for f in files}
    return {module_name(f, root): imports(f, root, known) for f in files}


def circles(edges: dict[str, list[tuple[str, str | None]]]) -> list[list[str]]:
    """Every import circle (module or function level), each as the modules it passes."""
    found, done = [], set()

    def walk(module: str, path: list[str]) -> None:
        for target, _ in edges.get(module, ()):
            if target in path:
                circle = path[path.index(target):]
                start = circle.index(min(circle))  # each circle once, from its first module
                circle = circle[start:] + circle[:start] + [min(circle)]
                if circle not in found:
                    found.append(circle)
            elif target not in done:
                walk(target, path + [target])
        done.add(module)

    for module in sorted(edges):
        walk(module, [module])
    return found


def crossings(edges, core: set[str], optional: set[str]) -> list[str]:
    """The imports of an optional module by a core module, but in BOUNDARY_FUNCTIONS."""
    return [f"{module} imports {target}" + (f" in {function}()" if function else "")
            for module in sorted(core) for target, function in edges.get(module, ())
            if target in optional and BOUNDARY_FUNCTIONS.get((module, function)) != target]


def python_files(paths: list[str]) -> list[Path]:
    """The Python files among the files and folders ``paths`` (relative to the root)."""
    files = []
    for name in paths:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f for f in files if f.suffix == ".py"]


def harness_graph():
    """The import graph of harness/ and of every file of the section's parts, and the parts."""
    parts = section_parts(contributing())
    every = sorted({f for files in parts.values() for f in python_files(files)}
                   | set((ROOT / "harness").rglob("*.py")))
    return graph(every, ROOT), parts


def test_the_harness_imports_in_no_circle():
    """Rule: No module of the harness imports one that imports it back, at module level
    or in a function. Fix: move what both need into the lower of the two, or reach a
    launcher's module by its name (`LAUNCHER_MODULES` in `harness/launch.py`)."""
    edges, _ = harness_graph()
    assert "harness.launch" in edges
    assert circles(edges) == []


def test_a_circle_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import thing\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    edges = graph(sorted((tmp_path / "pkg").glob("*.py")), tmp_path)
    assert edges["pkg.b"] == [("pkg.a", "f")]
    assert circles(edges) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_core_imports_no_optional_part():
    """Rule: The core of the harness imports no optional part (CONTRIBUTING.md, "How the
    harness is built"). Fix: reach the part through its boundary (a launcher's name, a
    plugin in `conftest.py`, a marker), or move the code into the part."""
    edges, parts = harness_graph()
    core = {module_name(f, ROOT) for f in python_files(parts["core"])}
    optional = {module_name(f, ROOT) for name, files in parts.items() if name != "core"
                for f in python_files(files)}
    assert crossings(edges, core, optional) == []
    assert all((target, function) in edges[module]  # no boundary listed that is gone
               for (module, function), target in BOUNDARY_FUNCTIONS.items())


def test_a_core_module_that_imports_an_optional_one_is_named():
    edges = {"harness.outputs": [("harness.profile", None)],
             "harness.launch": [("harness.slurm", "run")]}
    assert crossings(edges, {"harness.outputs", "harness.launch"},
                     {"harness.profile", "harness.slurm"}) == [
        "harness.launch imports harness.slurm in run()", "harness.outputs imports harness.profile"]


#: Imports the core, then looks up a launcher of each launcher module; prints the modules
#: of harness/ loaded after each step.
LOOK_UPS = """
import sys
from harness.launch import LAUNCHERS
import harness.outputs
print(sorted(m for m in sys.modules if m.startswith("harness.")))
for name in ("srun-env", "sbatch"):
    LAUNCHERS[name]
    print(sorted(m for m in sys.modules if m.startswith("harness.")))
"""


def test_a_launcher_module_is_imported_on_the_first_use_of_its_launcher():
    """Importing the core loads no launcher module; looking a launcher up loads the
    modules of LAUNCHER_MODULES up to the one that registers it, and no further."""
    ran = subprocess.run([sys.executable, "-c", LOOK_UPS], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    core, srun_env, sbatch = (ast.literal_eval(line) for line in ran.stdout.splitlines())
    assert core == ["harness.launch", "harness.outputs"]
    assert srun_env == [*core, "harness.slurm_env"]
    assert "harness.slurm" in sbatch and "harness.profile" in sbatch
    for module in LAUNCHER_MODULES:  # each registers a launcher
        importlib.import_module(module)
        assert any(build.__module__ == module for build in LAUNCHERS.values()), module
    with pytest.raises(KeyError, match="register it with @launcher"):
        LAUNCHERS["no-such-launcher"]


# --- The parts and their sizes ------------------------------------------------------------

def contributing() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert SECTION in text, f"CONTRIBUTING.md has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def bullets(section: str) -> list[str]:
    """Each bullet of the section as one line."""
    return [" ".join(b.split()) for b in re.split(r"(?m)^- ", section)[1:]]


def section_parts(section: str) -> dict[str, list[str]]:
    """The files of each part: ``core`` (a bullet per module, ```file`: what it does``),
    and each optional part (a bullet each, ``**name** (N lines: `file`, `folder/`...)``)."""
    parts = {"core": []}
    for bullet in bullets(section):
        head = re.match(r"\*\*(?P<name>[^*]+)\*\* \([\d,]+ lines: (?P<files>[^)]+)\)", bullet)
        if head:
            parts[head["name"]] = re.findall(r"`([^`]+)`", head["files"])
        else:
            parts["core"].append(re.match(r"`([^`]+)`:", bullet)[1])
    return parts


def lines(paths: list[str]) -> int:
    """Lines of the files and folders (every file under them, but caches)."""
    files = [f for name in paths for f in ((ROOT / name).rglob("*") if (ROOT / name).is_dir()
                                           else [ROOT / name])
             if f.is_file() and "__pycache__" not in f.parts]
    return sum(f.read_text().count("\n") for f in files)


def stated_figures(section: str) -> list[tuple[str, int, list[str]]]:
    """(part, lines stated, its files) for the core and each optional part."""
    parts = section_parts(section)
    stated = {"core": re.search(r"The core, ([\d,]+) lines", section)[1]} | dict(
        re.findall(r"(?m)^- \*\*([^*]+)\*\* \(([\d,]+) lines", section))
    return [(name, int(n.replace(",", "")), parts[name]) for name, n in stated.items()]


def stale_figures(section: str) -> list[str]:
    return [f"{what}: {stated} lines stated, {lines(files)} counted"
            for what, stated, files in stated_figures(section)
            if abs(stated - lines(files)) > SLACK / 100 * lines(files)]


def test_every_module_of_the_harness_is_in_one_part():
    """Rule: Every module of `harness/` is in exactly one part of CONTRIBUTING.md's "How
    the harness is built". Fix: add it to the core's list, or to the files of one
    optional part, in that section."""
    parts = section_parts(contributing())
    owners = {}
    for name, files in parts.items():
        for f in python_files(files):
            owners.setdefault(f.relative_to(ROOT).as_posix(), []).append(name)
    modules = sorted(f.relative_to(ROOT).as_posix() for f in (ROOT / "harness").rglob("*.py")
                     if f.name != "__init__.py")  # a package's mark
    assert {m: owners.get(m, []) for m in modules if len(owners.get(m, [])) != 1} == {}


def test_the_sizes_contributing_states_are_the_files():
    """Rule: The line counts of CONTRIBUTING.md's "How the harness is built" are within
    5 % of the files'. Fix: write there the counts the failure gives."""
    stale = stale_figures(contributing())
    assert not stale, (f"update the figures of CONTRIBUTING.md's section {SECTION!r} (lines, "
                       "as `wc -l` counts them):\n" + "\n".join(stale))


def test_a_stale_size_is_named():
    mirror, budget = lines(["harness/mirror.py"]), lines(["harness/plugins/budget.py"])
    section = (f"The core, {mirror} lines:\n\n- `harness/mirror.py`: the mirror rule.\n\n"
               f"- **Budget** ({budget + 3} lines: `harness/plugins/budget.py`): a plugin.\n")
    assert stale_figures(section) == [f"Budget: {budget + 3} lines stated, {budget} counted"]
