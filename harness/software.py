"""What each snippet needs of its software, and whether a centre's environment gives it.

A centre profile's ``[environment] torch`` names the release of PyTorch its setup lines
give (a module, a container), and ``packages`` the other Python packages they give
(harness/profile.py). Without ``torch`` the job scripts run in the reader's own virtual
environment, made from requirements.txt (Accelerate and Horovod, which it lacks, come from
requirements-extras.txt and build_horovod.sh), and nothing here applies.

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

prints the scripts the environment cannot run, grouped by what stops them, and those
whose tests have not run on its release.

A missing package goes into a virtual environment made on top of the module or the
container image with ``--system-site-packages``. That flag shows the new environment the
packages of the installation its Python was made from; where the module's or the image's
Python is itself a virtual environment (as /opt/venv of the LUMI AI Factory's images is;
their PYTHONPATH names it as well, a module's may not), its own packages are not among
them, so a ``.pth`` file in the new environment names their folders (:data:`SEE_BASE`; tests/harness/test_software.py runs these lines). A
launcher starts its processes with the Python it runs under (``torchrun``:
``PYTHON_EXEC``, else ``sys.executable``, torch/distributed/run.py; ``deepspeed`` and
``accelerate launch``: ``sys.executable``), so the job script runs a launcher that comes
with the module or the image as ``python -m`` of its module, with the new environment's
Python.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
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
#: A script's ``NEEDS = "2.8"`` line (tests/test_snippet_tests.py checks its guard).
NEEDS = re.compile(r'^NEEDS = "(\d+\.\d+)"', re.M)
#: A command at the start of a line, or after srun, exec or bash -c (profile.render's).
_COMMAND = profiles._LAUNCH
#: The module each launcher command runs, for ``python -m``.
LAUNCHERS = {"torchrun": "torch.distributed.run", "deepspeed": "deepspeed.launcher.runner",
             "accelerate": "accelerate.commands.accelerate_cli"}
#: The line, run with the module's or the image's Python, that lets ``.venv`` see that
#: Python's packages where that Python is itself a virtual environment: a ``.pth`` file
#: in .venv's site-packages that names their folders (site.py adds each to sys.path).
SEE_BASE = ("python -c \"import site, sysconfig; open(sysconfig.get_path('purelib', "
            "'posix_prefix', {'base': '.venv'}) + '/base.pth', 'w')"
            ".write('\\n'.join(site.getsitepackages()))\"")


@dataclass(frozen=True)
class Problem:
    """Why the environment cannot run a script, and what the reader changes: ``fix``,
    then the shell ``lines`` it runs, if any, then the change to the job script once they
    have run (:meth:`after`)."""
    sentence: str
    fix: str
    reason: str  # the cause in a few words, no brackets: "needs scikit-learn for train.py"
    kind: str = ""  # the cause, for grouping: "needs scikit-learn", "needs PyTorch ≥ 2.10"
    lines: tuple[str, ...] = ()  # shell lines the fix runs, if any
    then: str = ""  # the change to the job script: "Then add ...", without a full stop
    because: str = ""  # why that change, where it is not plain, without a full stop
    page: str = ""  # a page of the guide that says more (a document name)

    def after(self) -> str:
        """The change to the job script, and why, after the lines."""
        return f"{self.then}: {self.because}." if self.because else f"{self.then}."

    def again(self, first: str) -> str:
        """The fix, as a sentence, where the note under ``first``, earlier on the same
        page, gives the same one: only what differs, the change to the job script."""
        if not self.lines:
            return f"Change it as the note under `{first}` says."
        return (f"With the virtual environment of the note under `{first}`, "
                f"{re.sub('^Then,? ', '', self.then)}.")


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
        for release in NEEDS.findall(_code(file)):
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


def _programs(snippet: str, root: Path) -> list[str]:
    """The commands that run PyTorch in a job script (python, torchrun, deepspeed,
    accelerate), in the order of their first use; for another script, those that may
    start it: python and torchrun."""
    if not snippet.endswith(".sbatch"):
        return ["python", "torchrun"]
    code = "\n".join("" if line.lstrip().startswith("#") else line
                     for line in (root / snippet).read_text().split("\n"))
    return list(dict.fromkeys(m[1].removesuffix("3") for m in _COMMAND.finditer(code)))


def _script(snippet: str) -> str:
    """The job script, for a sentence about a script."""
    return "the job script" if snippet.endswith(".sbatch") else "the job script that runs it"


def _newer(snippet: str, p: profiles.Profile, release: str) -> str:
    """What to change where the script needs a newer PyTorch than the environment's."""
    venv = f"a virtual environment with PyTorch {release} or newer"
    script = _script(snippet)
    if p.container_image:
        return (f"Use an image with PyTorch {release} or newer, if {p.name} has one: name "
                f"it in the `export CONTAINER=` line of {script}. Otherwise use {venv}: in "
                f"{script}, put `source .venv/bin/activate` in place of the module lines, "
                f"and start the commands without `{p.container_exec} $CONTAINER`")
    if p.setup:
        return (f"Use a module with PyTorch {release} or newer, if {p.name} has one: put "
                f"its `module load` lines in place of those of {script}. Otherwise use "
                f"{venv}: in place of the module lines, load only the modules it was made "
                f"with (not a PyTorch module), then `source .venv/bin/activate`")
    return f"Run it in {venv}"


def _then(snippet: str, p: profiles.Profile, installed: list[str],
          root: Path) -> tuple[str, str]:
    """The change to the job script that runs its commands with .venv's Python, a
    sentence that starts with "Then ", and why, where it changes a launcher.
    ``installed``: the packages the lines put into .venv, whose commands come with them;
    a launcher of the module or the image becomes ``python -m`` of its module, run by
    .venv's Python."""
    script = _script(snippet)
    programs = _programs(snippet, root)
    theirs = [x for x in programs if x in LAUNCHERS and x not in installed]
    if p.container_image:
        run = f"{p.container_exec} $CONTAINER"
        swaps = [(f"{run} {x}", f"{run} .venv/bin/{x}") if x == "python" or x not in theirs
                 else (f"{run} {x}", f"{run} .venv/bin/python -m {LAUNCHERS[x]}")
                 for x in programs]
        text = f"Then, in {script}, write " + _and([f"`{new}` for `{old}`"
                                                   for old, new in swaps])
    else:
        where = "after its module lines" if p.setup else "before its first command"
        text = f"Then add `source .venv/bin/activate` to {script}, {where}"
        if theirs:
            text += ", and write " + _and([f"`python -m {LAUNCHERS[x]}` for `{x}`"
                                           for x in theirs])
    because = (f"`{theirs[0]}` starts its processes with the Python it runs under, which "
               f"may be the Python of {_gives(p)}, and that one does not see `.venv`"
               ) if theirs else ""
    return text, because


def problems(snippet: str, p: profiles.Profile, root: Path = SNIPPETS) -> list[Problem]:
    """Why the environment of ``p`` cannot run the script as it is (none without
    ``[environment] torch``, or for a script that does not use PyTorch)."""
    if not p.torch or not uses_torch(snippet, root):
        return []
    needed = needs(snippet, root)
    if needed and key(p.torch) < key(needed[0]):
        release, why = needed
        kind = f"needs PyTorch ≥ {release}"
        reason = f"{kind} {why}" if why.startswith("for ") else f"{kind}: {why}" if why else kind
        return [Problem(
            f"{kind}{f' ({why})' if why else ''}; the environment of {p.name} gives {p.torch}",
            _newer(snippet, p, release), reason, kind, page=ENVIRONMENT_PAGE)]
    have = {normal(name) for name in p.packages}
    sources = _sources(snippet, root)
    missing = [name for name in sorted(sources) if normal(name) not in have]
    if not missing:
        return []
    others = sorted({f for name in missing for f in sources[name]} - {Path(snippet).name})
    kind = f"needs {_and(missing)}"
    if others:
        sentence, reason = f"{kind} (for {_and(others)})", f"{kind} for {_and(others)}"
    else:
        sentence = reason = f"imports {_and(missing)}"
    sentence += f", which the environment of {p.name} does not provide"
    pip = [name for name in missing if name not in INSTALL]
    run = f"{p.container_exec} $CONTAINER " if p.container_image else ""
    lines = [*p.setup]
    if p.container_image:
        lines.append(f"export CONTAINER={p.container_image}")
    lines += [f"{run}python -m venv --system-site-packages .venv",
              f"{run}{SEE_BASE}  # where the Python of {_gives(p)} is a virtual environment"]
    lines += [f"{run}.venv/bin/python -m pip install {' '.join(pip)}"] if pip else []
    lines += [f"{run}{'env ' if run else ''}PYTHON=.venv/bin/python {INSTALL[name]}"
              for name in missing if name in INSTALL]
    fix = (f"Make a virtual environment on top of {_gives(p)} that adds "
           f"{'it' if len(missing) == 1 else 'them'}, once, on the login node, in the "
           f"folder you submit from:")
    return [Problem(sentence, fix, reason, kind, tuple(lines),
                    *_then(snippet, p, missing, root), ENVIRONMENT_PAGE)]


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
    """``{what stops them: [scripts]}`` of the scripts that cannot run, in a few words
    ("needs PyTorch ≥ 2.10", "needs deepspeed"), most scripts first."""
    grouped: dict[str, list[str]] = {}
    for script, found in report(p, root).items():
        grouped.setdefault(found[0].kind, []).append(script)
    return dict(sorted(grouped.items(), key=lambda item: -len(item[1])))


def _count(n: int, what: str = "script") -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _listed(names: list[str], indent: str = "    ") -> list[str]:
    """Names, comma-separated, in lines of at most 100 characters."""
    return textwrap.wrap(", ".join(names), 100, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False)


def _requirements(name: str) -> set[str]:
    """The pip names (normalised) pinned in a requirements file of the guide's folder."""
    text = (profiles.ROOT / name).read_text()
    return {normal(re.split(r"[=<>~!\[; ]", line, maxsplit=1)[0]) for line in text.splitlines()
            if line.strip() and not line.startswith(("#", "-"))}


def _own_environment(root: Path) -> str:
    """What the reader's own environment, from requirements.txt, lacks of what the
    scripts that use PyTorch import, and what adds it."""
    used = {name for s in scripts(root) if uses_torch(s, root) for name in packages(s, root)}
    pinned = _requirements("requirements.txt")
    lacking = sorted(name for name in used if normal(name) not in pinned)
    if not lacking:
        return "which has every package the scripts import"
    extras = _requirements("requirements-extras.txt")
    adds = [f"requirements-extras.txt adds {_and([n for n in lacking if normal(n) in extras])}"
            ] if any(normal(n) in extras for n in lacking) else []
    adds += [f"frameworks/{INSTALL[n].split()[-1]} builds {n}" for n in lacking if n in INSTALL]
    rest = [n for n in lacking if normal(n) not in extras and n not in INSTALL]
    adds += [f"nothing of the guide adds {_and(rest)}"] if rest else []
    return (f"which has every package the scripts import but {_and(lacking)} "
            f"({'; '.join(adds)}; make test-extras installs them here)")


def summary(p: profiles.Profile, root: Path = SNIPPETS) -> list[str]:
    """The scripts the environment cannot run as they are, grouped by what stops them,
    and the scripts whose tests have not run on its release, with the command that runs
    them there."""
    where = p.path.resolve()
    where = where.relative_to(profiles.ROOT) if where.is_relative_to(profiles.ROOT) else where
    if not p.torch:
        return [f"{where}: no [environment] torch: the job scripts run in the reader's own "
                f"virtual environment, made from requirements.txt, {_own_environment(root)}"]
    gives = _and([f"PyTorch {p.torch}", *p.packages])
    grouped = reasons(p, root)
    stopped = {s for found in grouped.values() for s in found}
    if not stopped:
        lines = [f"{where}: the environment of {p.name} gives {gives}; it can run every "
                 f"script"]
    else:
        lines = [f"{where}: the environment of {p.name} gives {gives}; it cannot run "
                 f"{_count(len(stopped))} as they are (a note under each, on its page, says "
                 f"what to change):"]
        for kind, found in grouped.items():
            lines += [f"  {kind}: {_count(len(found))}", *_listed(found)]
    releases = current(root=root)
    gaps = [s for s in scripts(root) if s not in stopped and untested(s, p, releases, root)]
    if gaps:
        lines += [f"Not yet tested with PyTorch {p.torch}: "
                  f"{_count(len(gaps), 'more script' if stopped else 'script')}; "
                  f"make test CENTRE={where} runs their tests on it:", *_listed(gaps)]
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.software [PROFILE]``: the scripts the profile's environment
    cannot run as they are, by what stops them, and those not yet tested on its release."""
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
