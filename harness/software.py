"""What each snippet needs of its software, and whether a centre's environment gives it.

A centre profile's ``[environment] torch`` names the release of PyTorch its setup lines
give (a module, a container), and ``packages`` the other Python packages they give
(harness/profile.py). Without ``torch`` the job scripts run in the reader's own virtual
environment, made from requirements.txt: it has everything, and nothing here applies.

A script (a Python file, a notebook or a job script, with the files of its folder it
names: harness.torch_versions.dependencies) that uses PyTorch needs:

- the newest release that one of those files asks for with ``NEEDS = "X.Y"``, or 2.3 where
  one passes ``device_id`` to ``init_process_group`` (the keyword is missing from
  torch/distributed/distributed_c10d.py in the 2.2.2 wheel, present in 2.3.1's);
- the packages those files import, by their pip names (not the standard library, not
  torch, not the modules of their own folder), and for a job script the ``deepspeed`` and
  ``accelerate`` commands it runs.

:func:`problems` says why the environment cannot run a script as it is, one sentence and
the change for the reader each; :func:`untested` says when the environment's release is
one the script's tests have not passed on (docs/_data/torch_versions.json). The pages show
both (docs/_ext/snippets.py, docs/_ext/centre.py), ``make test CENTRE=...`` leaves out
the tests of what cannot run (harness/plugins/claimed.py), and

    python -m harness.software [PROFILE]

prints every script the environment cannot run, and why, one line each.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import profile as profiles
from harness.torch_versions import SNIPPETS, current, dependencies, key, tested_range

#: Import names whose pip name differs.
PIP_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml"}
#: Commands of a job script that come with a package.
COMMANDS = ("deepspeed", "accelerate")
#: Packages that pip cannot just install: the command that does, with the Python that
#: $PYTHON names, from the folder of the script (docs/frameworks/horovod.md).
INSTALL = {"horovod": "bash build_horovod.sh"}
#: Keywords of torch's calls that came with a release: (function, keyword): release.
KEYWORDS = {("init_process_group", "device_id"): "2.3"}
#: The page that says how to make a virtual environment (a document name of docs/).
ENVIRONMENT_PAGE = "slurm/environment"
#: The files of a script that can run: what the pages call scripts.
SCRIPTS = (".py", ".ipynb", ".sbatch")
_NEEDS = re.compile(r'^NEEDS = "(\d+\.\d+)"', re.M)
#: A command at the start of a line, or after srun, exec or bash -c (profile.render's).
_COMMAND = profiles._LAUNCH


@dataclass(frozen=True)
class Problem:
    """Why the environment cannot run a script, and what the reader changes."""
    sentence: str
    fix: str
    reason: str  # the sentence's cause in a few words: "needs PyTorch ≥ 2.10"
    lines: tuple[str, ...] = ()  # shell lines the fix runs, if any
    page: str = ""  # a page of the guide that says more (a document name)


def pip_name(module: str) -> str:
    """The pip name of a top-level import name."""
    return PIP_NAMES.get(module, module)


def normal(name: str) -> str:
    """A package name as pip compares them: scikit_learn and Scikit-Learn are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _code(file: Path) -> str:
    """The Python of a file: a notebook's code cells without their shell and magic lines."""
    text = file.read_text(encoding="utf-8")
    if file.suffix != ".ipynb":
        return text
    cells = ["".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    return "\n".join(line for cell in cells for line in cell.splitlines()
                     if not line.lstrip().startswith(("!", "%")))


def _tree(file: Path) -> ast.AST | None:
    try:
        return ast.parse(_code(file))
    except SyntaxError:
        return None


def _files(snippet: str, root: Path = SNIPPETS) -> list[Path]:
    """The script and the Python files of its folder that it runs: for a job script, those
    it names (harness.torch_versions.dependencies, one level); then the modules of the
    folder that each of them imports, and so on. A file named only in a docstring, as
    fsdp1.py names fsdp2.py, is not run."""
    file = root / snippet
    start = [file]
    if file.suffix == ".sbatch":
        text = file.read_text()
        start += [root / d for d in dependencies(snippet, root) if d.endswith(".py")
                  and re.search(rf"(?<![\w.-]){re.escape(Path(d).name)}(?![\w-])", text)]
        start.sort(key=lambda f: f.stem != file.stem)  # its own script first
    found, todo = list(start), list(start)
    while todo:
        for name in sorted(_imports(todo.pop(), own=True)):
            module = file.parent / f"{name}.py"
            if module.is_file() and module not in found:
                found.append(module)
                todo.append(module)
    return found


def _written(file: Path) -> set[str]:
    """The modules a notebook writes itself (``%%writefile ddp_worker.py``)."""
    if file.suffix != ".ipynb":
        return set()
    return set(re.findall(r"%%writefile\s+(\w+)\.py", file.read_text()))


def _imports(file: Path, own: bool = False) -> set[str]:
    """The top-level names ``file`` imports: with ``own``, only those of modules of its
    folder (or that it writes itself), else only the others."""
    tree = _tree(file) if file.suffix in (".py", ".ipynb") else None
    if tree is None:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    folder = {p.stem for p in file.parent.glob("*.py")} | _written(file)
    return names & folder if own else names - folder


def uses_torch(snippet: str, root: Path = SNIPPETS) -> bool:
    """Whether the script or a file it names imports torch."""
    return any("torch" in _imports(f) for f in _files(snippet, root))


def needs(snippet: str, root: Path = SNIPPETS) -> tuple[str, str] | None:
    """(release, why) of the newest PyTorch the script needs, or None; why is "" where
    the script's own ``NEEDS`` asks for it, else a phrase: "for hybrid_2d.py", "it passes
    device_id to init_process_group"."""
    found = []
    for file in _files(snippet, root):
        own = file == root / snippet
        for release in _NEEDS.findall(_code(file)):
            found.append((release, "" if own else f"for {file.name}"))
        tree = _tree(file) if file.suffix in (".py", ".ipynb") else None
        for node in ast.walk(tree) if tree is not None else ():
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            for keyword in node.keywords:
                release = KEYWORDS.get((name, keyword.arg))
                if release:
                    found.append((release, f"{'it' if own else file.name} passes "
                                           f"{keyword.arg} to {name}"))
    return max(found, key=lambda f: key(f[0]), default=None)


def _sources(snippet: str, root: Path = SNIPPETS) -> dict[str, list[str]]:
    """``{pip name: [names of the files that need it]}`` of the third-party packages."""
    found: dict[str, list[str]] = {}
    for file in _files(snippet, root):
        for name in sorted(_imports(file)):
            if name not in sys.stdlib_module_names and name not in ("torch", "__future__"):
                found.setdefault(pip_name(name), []).append(file.name)
    if snippet.endswith(".sbatch"):
        code = "\n".join("" if line.lstrip().startswith("#") else line
                         for line in (root / snippet).read_text().split("\n"))
        for m in _COMMAND.finditer(code):
            if m[1] in COMMANDS:
                found.setdefault(m[1], []).append(Path(snippet).name)
    return found


def packages(snippet: str, root: Path = SNIPPETS) -> list[str]:
    """The pip names of the third-party packages the script needs, sorted."""
    return sorted(_sources(snippet, root))


def _gives(p: profiles.Profile) -> str:
    """What the setup lines are, for a sentence: "the module", "the container image"."""
    return "the container image" if p.container_image else (
        "the module" if p.setup else "the environment")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def problems(snippet: str, p: profiles.Profile, root: Path = SNIPPETS) -> list[Problem]:
    """Why the environment of ``p`` cannot run the script as it is (none without
    ``[environment] torch``, or for a script that does not use PyTorch)."""
    if not p.torch or not uses_torch(snippet, root):
        return []
    needed = needs(snippet, root)
    if needed and key(p.torch) < key(needed[0]):
        release, why = needed
        reason = f"needs PyTorch ≥ {release}{f' ({why})' if why else ''}"
        return [Problem(
            f"{reason}; the environment of {p.name} gives {p.torch}",
            f"Run it in a virtual environment with PyTorch {release} or newer instead of "
            f"{_gives(p)}", reason, page=ENVIRONMENT_PAGE)]
    have = {normal(name) for name in p.packages}
    sources = _sources(snippet, root)
    missing = [name for name in sorted(sources) if normal(name) not in have]
    if not missing:
        return []
    others = sorted({f for name in missing for f in sources[name]} - {Path(snippet).name})
    reason = (f"needs {_and(missing)} (for {_and(others)})" if others
              else f"imports {_and(missing)}")
    sentence = f"{reason}, which the environment of {p.name} does not provide"
    pip = [name for name in missing if name not in INSTALL]
    if p.container_image:
        run = f"{p.container_exec} {p.container_image}"
        lines = ([f"{run} python -m pip install --user {' '.join(pip)}"] if pip else []) + [
            f"{run} env PIP_USER=1 {INSTALL[name]}"
            for name in missing if name in INSTALL]
        return [Problem(sentence, "Install it into your home folder, which the container "
                        "sees, once, on the login node:", reason, tuple(lines))]
    lines = [*p.setup, "python -m venv --system-site-packages .venv"]
    lines += [f".venv/bin/pip install {' '.join(pip)}"] if pip else []
    lines += [f"PYTHON=.venv/bin/python {INSTALL[name]}" for name in missing if name in INSTALL]
    return [Problem(sentence, f"Make a virtual environment on top of {_gives(p)}, once, on "
                    f"the login node, in the folder you submit from; the job script then "
                    f"activates it with `source .venv/bin/activate` after its "
                    f"{'module ' if p.setup else ''}lines:", reason, tuple(lines),
                    page=ENVIRONMENT_PAGE)]


def untested(snippet: str, p: profiles.Profile, releases: dict | None = None,
             root: Path = SNIPPETS) -> str:
    """"not yet tested with 2.1.2 (tested with 2.6.0–2.13.0)" where the environment's
    release is outside the script's tested range and the script does not refuse it; ""
    otherwise. ``releases``: harness.torch_versions.current() (read when not given)."""
    if not p.torch or not uses_torch(snippet, root):
        return ""
    needed = needs(snippet, root)
    if needed and key(p.torch) < key(needed[0]):
        return ""  # a problem, not a gap in the tests
    releases = current(root=root) if releases is None else releases
    found = tested_range(releases.get(snippet, {}))
    if found is None or key(found[0]) <= key(p.torch) <= key(found[1]):
        return ""
    span = found[0] if found[0] == found[1] else f"{found[0]}–{found[1]}"
    return f"not yet tested with {p.torch} (tested with {span})"


def scripts(root: Path = SNIPPETS) -> list[str]:
    """Every script of snippets/ (paths relative to it), sorted."""
    return sorted(f.relative_to(root).as_posix() for f in root.rglob("*")
                  if f.suffix in SCRIPTS and f.is_file() and "__pycache__" not in f.parts)


def report(p: profiles.Profile, root: Path = SNIPPETS) -> dict[str, list[Problem]]:
    """``{script: problems}`` of every script the environment cannot run as it is."""
    found = {s: problems(s, p, root) for s in scripts(root)} if p.torch else {}
    return {s: found[s] for s in found if found[s]}


def reasons(p: profiles.Profile, root: Path = SNIPPETS) -> dict[str, list[str]]:
    """``{reason: [scripts]}``: the scripts that cannot run, by what stops them, in a few
    words ("needs PyTorch ≥ 2.10", "needs deepspeed")."""
    grouped: dict[str, list[str]] = {}
    for script, found in report(p, root).items():
        reason = found[0].reason.split(" (")[0].replace("imports ", "needs ", 1)
        grouped.setdefault(reason, []).append(script)
    return grouped


def summary(p: profiles.Profile, root: Path = SNIPPETS) -> list[str]:
    """One line per script the environment cannot run, and one for the scripts not yet
    tested with its release."""
    where = p.path.resolve()
    where = where.relative_to(profiles.ROOT) if where.is_relative_to(profiles.ROOT) else where
    if not p.torch:
        return [f"{where}: no [environment] torch: the job scripts run in the reader's own "
                f"virtual environment, from requirements.txt, which has everything"]
    found = report(p, root)
    lines = [f"{where}: the environment of {p.name} (PyTorch {p.torch}, "
             f"{_and(list(p.packages)) if p.packages else 'no other packages'}) cannot run "
             f"{len(found)} script(s) as they are:" if found else
             f"{where}: the environment of {p.name} (PyTorch {p.torch}) can run every script"]
    for script, problem in found.items():
        lines.append(f"  {script}: {problem[0].sentence}")
    releases = current(root=root)
    gaps = [s for s in scripts(root) if s not in found and untested(s, p, releases, root)]
    if gaps:
        lines.append(f"{len(gaps)} other script(s) not yet tested with PyTorch {p.torch}: "
                     f"{', '.join(gaps)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.software [PROFILE]``: every script the profile's environment
    cannot run as it is, and why, one line each."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or args and args[0].startswith("-"):
        print("usage: python -m harness.software [PROFILE]  (default: $CENTRE, else "
              "profiles/default.toml)", file=sys.stderr)
        return 2
    try:
        p = profiles.load(args[0] if args else None)
    except profiles.ProfileError as error:
        print(error, file=sys.stderr)
        return 1
    print("\n".join(summary(p)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
