"""Start a snippet under a launcher, the way a reader would, and report what happened.

Every test starts its processes through :func:`run`. A launcher turns a snippet
into the list of processes a reader's command would start (``python``,
``torchrun``, two ``torchrun`` agents, a hand-set environment, ``mpirun``,
``srun``...). Each run gets a free port, ``OMP_NUM_THREADS=1``, its own working
directory, a hard time limit, and none of the variables of the tests' shell that a
reader's job would not have (:data:`NOT_THE_READERS`); when it ends, every process it
started, and every process those started, is killed. A run fails loudly when a process
failed, timed out, printed nothing, or when a rank never joined its process
group, and the failure message holds the tail of every process's output.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib
import json
import os
import pickle
import re
import runpy
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
SITE_DIR = Path(__file__).resolve().parent / "site"
BIN = Path(sys.executable).parent

#: Tag put in the environment of everything the test session starts, so
#: that leftovers can be found in /proc and killed.
SESSION_TAG = "SNIPPET_HARNESS_SESSION"
RUN_TAG = "SNIPPET_HARNESS_RUN"
SESSION_ID = uuid.uuid4().hex  # new in every session, even one started by a test

DEFAULT_TIMEOUT = float(os.environ.get("SNIPPET_TIMEOUT", "120"))
#: After one process fails, how long the others get to finish on their own.
FAILURE_GRACE = 10.0
TAIL_LINES = 25


@dataclass
class Proc:
    """One process a launcher starts: a name for reports, argv, extra environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Launch:
    """What a launcher needs to know about the run it builds."""

    script: Path
    args: list[str]
    nproc: int
    nnodes: int
    port: int
    workdir: Path
    options: dict
    #: The environment the test gave the run (``run(env=...)``), over the session's.
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Output:
    name: str
    returncode: int | None
    stdout: str
    stderr: str


#: The note gloo prints on stdout for each new group of processes in some releases (2.8.0
#: to 2.10.0), in pieces: "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of
#: connected peer ranks is : 1". Processes that share one stdout interleave the pieces.
GLOO_NOTE_PIECES = ("Expected number of connected peer ranks is :", "[Gloo] Rank",
                    "is connected to", "peer ranks.")
#: What is left of a line that held only notes (or the end of one): their numbers, after
#: a launcher's prefix.
GLOO_NOTE_LEFT = re.compile(r"^(\[\w+\]:|\d+: )?[\d ]*$")


def without_gloo_notes(text: str) -> str:
    """``text`` without gloo's notes, which are not the snippet's output and which other
    releases do not print: every line that holds nothing but their pieces and numbers
    goes (in text with notes, so also a line of numbers alone), and so does an empty line
    right after them."""
    if GLOO_NOTE_PIECES[0] not in text:
        return text
    lines, after_note = [], False
    for line in text.splitlines(keepends=True):
        bare = line
        for piece in GLOO_NOTE_PIECES:
            bare = bare.replace(piece, "")
        if (bare.strip() and GLOO_NOTE_LEFT.match(bare.rstrip("\n"))
                or after_note and not line.strip()):  # or the end of a note's line
            after_note = True
            continue
        lines.append(line)
        after_note = False
    return "".join(lines)


@dataclass
class Result:
    script: Path
    launcher: str
    returncode: int
    timed_out: bool
    seconds: float
    outputs: list[Output]
    ranks_started: set[int]
    workdir: Path
    #: The command a reader types for each process the launcher started
    #: (:func:`reader_command`): what a captured output shows above the output.
    command: list[str] = field(default_factory=list)
    #: The port the processes met at, which the command shows as :data:`READER_PORT`.
    port: int | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def stdout(self) -> str:
        """Standard output of the first process (rank 0, or the first agent)."""
        return self.outputs[0].stdout

    @property
    def text(self) -> str:
        """Everything every process printed, stdout and stderr."""
        return "\n".join(o.stdout + o.stderr for o in self.outputs)

    def report(self) -> str:
        state = "timed out" if self.timed_out else f"exit code {self.returncode}"
        if not self.ok and any(EXIT_ABORT.search(o.stdout + o.stderr) for o in self.outputs):
            state += f"; {EXIT_ABORT_MESSAGE}"
        lines = [
            f"{self.launcher} {os.path.relpath(self.script, ROOT)}: {state} "
            f"after {self.seconds:.1f} s; ranks started: {sorted(self.ranks_started)}"
        ]
        for o in self.outputs:
            for stream in ("stdout", "stderr"):
                tail = getattr(o, stream).splitlines()[-TAIL_LINES:]
                lines.append(f"--- {o.name} {stream} (exit {o.returncode}), last {len(tail)} lines ---")
                lines.extend(tail)
        return "\n".join(lines)


#: The modules that register the other launchers (they import this module, which
#: imports none of them): the environments of a Slurm job without Slurm (srun-env,
#: started-by), the other frameworks' (Horovod, DeepSpeed, Accelerate, TensorFlow), and
#: Slurm's (sbatch, srun, real-*), an optional part: :data:`LAUNCHERS` imports them in
#: this order, on the first lookup of a name it does not know yet.
LAUNCHER_MODULES = ("harness.slurm_env", "harness.frameworks", "harness.slurm")


class _Launchers(dict):
    """Launchers by name: a name not registered yet imports :data:`LAUNCHER_MODULES`, one
    at a time, until one of them registers it."""

    def __missing__(self, name: str) -> Callable[[Launch], list[Proc]]:
        for module in LAUNCHER_MODULES:
            importlib.import_module(module)
            if name in self:
                return self[name]
        raise KeyError(f"no launcher {name!r} (known: {', '.join(sorted(self))}): register "
                       f"it with @launcher in harness/launch.py or a module of "
                       f"LAUNCHER_MODULES")


#: Every launcher by name (:func:`launcher` registers one).
LAUNCHERS: dict[str, Callable[[Launch], list[Proc]]] = _Launchers()
#: A launcher's own way of writing the reader's command, where :func:`reader_command`'s
#: reading of its processes is not what a reader types (``sbatch``, ``python``).
COMMANDS: dict[str, Callable[[Launch, list[Proc]], list[str]]] = {}
#: Every script :func:`run` started in this process, in order (the GPU report reads which
#: snippets each test ran: harness/gpu_report.py).
RAN: list[Path] = []

#: A folder that every process of one test session shares (conftest.py makes it): the
#: runs :func:`shared` keeps are stored there, so each happens once per session.
SHARED_RUNS = "SNIPPET_HARNESS_SHARED_RUNS"


def shared(fn):
    """Like ``functools.cache``, but across the processes of one test session (the
    workers of ``pytest -n``): the first process to call ``fn(*args)`` runs it, the
    others wait for it and read its result. Without the session's folder, a plain cache.

    The device mode of the calling test (DEVICE_ENV: "cpu", or unset in a multigpu
    test) is part of the key: on a GPU node a CPU test and a GPU test never share a run."""
    kept = {}

    @functools.wraps(fn)
    def cached(*args):
        key = (os.environ.get(DEVICE_ENV), args)
        if key not in kept:
            kept[key] = _shared_call(fn, args)
        return kept[key]

    return cached


def _shared_call(fn, args):
    folder = os.environ.get(SHARED_RUNS)
    if not folder:
        return fn(*args)
    key = repr((fn.__module__, fn.__qualname__, os.environ.get(DEVICE_ENV), args))
    key = hashlib.sha256(key.encode()).hexdigest()[:32]
    path = Path(folder) / f"{key}.pickle"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an error
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = fn(*args)
        path.with_suffix(".partial").write_bytes(pickle.dumps(value))
        path.with_suffix(".partial").rename(path)
        return value


def launcher(name: str, command: Callable[[Launch, list[Proc]], list[str]] | None = None):
    """Register a function that turns a :class:`Launch` into processes (and, with
    ``command``, how the reader's command is written for them)."""

    def register(build: Callable[[Launch], list[Proc]]):
        LAUNCHERS[name] = build
        if command is not None:
            COMMANDS[name] = command
        return build

    return register


# --- The reader's command -----------------------------------------------------------------

#: The port a reader's command shows where the run used its own free port: torch's default.
READER_PORT = 29500
#: Variables a launcher sets that belong to the reader's command (the hand-set environment
#: of a rank, what Slurm or Open MPI would set, the meeting point, TensorFlow's cluster).
SHOWN_VARIABLES = re.compile(
    r"(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TF_CONFIG"
    r"|SLURM_\w+|OMPI_\w+)$")
#: Variables a test gives a run (``run(env=...)``) that are the reader's to set: which GPUs
#: a process sees, and the settings of PyTorch, NCCL and TensorFlow.
READER_VARIABLES = re.compile(r"(CUDA_VISIBLE_DEVICES|(PYTORCH|TORCH|NCCL|TF)_\w+)$")
#: Words the tests add that a reader never types: Open MPI run as root in a container or
#: with more ranks than cores, and the tests' wrappers that have every rank save what it
#: holds (tests/compare.py) and count the GPUs a run saw (tests/on_gpus.py).
TESTS_ONLY = {"--allow-run-as-root", "--oversubscribe", "every_rank_saves.py", "sees_gpus.py"}


def reader_command(l: Launch, procs: list[Proc]) -> list[str]:
    """The command a reader types for each process, as one shell line each: programs by
    their names (``python``, ``torchrun``), files by their names (the reader runs them in
    their folder), the variables the test or the launcher set in front
    (:data:`READER_VARIABLES`, :data:`SHOWN_VARIABLES`), and the run's own port as
    :data:`READER_PORT`."""
    given = {k: v for k, v in l.env.items() if READER_VARIABLES.match(k)}
    return [_readable(proc, meeting_port(l), given) for proc in procs]


def meeting_port(l: Launch) -> int:
    """The port the processes of a launch meet at: the run's own, or the one its test
    named (``master_port``)."""
    return l.options.get("master_port", l.port)


def as_reader_port(text: str, port: int | None) -> str:
    """``text`` with the run's ``port`` written as :data:`READER_PORT`."""
    return text if port is None else re.sub(rf"(?<![\d.]){port}(?!\d)", str(READER_PORT), text)


def _readable(proc: Proc, port: int, given: dict[str, str]) -> str:
    argv = list(proc.argv)
    variables = given | {k: v for k, v in proc.env.items() if SHOWN_VARIABLES.match(k)}
    if argv[0] == "env":  # env [-u NAME | -C DIR | NAME=VALUE]... PROGRAM ARGS
        i = 1
        while i < len(argv) and (argv[i] in ("-u", "-C") or "=" in argv[i]):
            if argv[i] in ("-u", "-C"):
                i += 2
                continue
            name, _, value = argv[i].partition("=")
            if SHOWN_VARIABLES.match(name):
                variables[name] = value
            i += 1
        argv = argv[i:]
    if argv[:len(TORCHRUN)] == TORCHRUN:
        argv = ["torchrun", *argv[len(TORCHRUN):]]
    words = [_program(w) for w in argv]
    line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in variables.items()),
                     shlex.join(w for w in words if w not in TESTS_ONLY)])
    return as_reader_port(line, port)


def _program(word: str) -> str:
    """A path by its file name; a Python interpreter as ``python``."""
    if not os.path.isabs(word):
        return word
    name = Path(word).name
    return "python" if re.fullmatch(r"python[\d.]*", name) else name


def command_of(l: Launch, procs: list[Proc], launcher_name: str) -> list[str]:
    """The reader's command for a launch: the launcher's own way, else :func:`reader_command`."""
    return COMMANDS.get(launcher_name, reader_command)(l, procs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: "cpu" in the environment of every run of a test not marked multigpu: the harness's
#: sitecustomize then hides the GPUs from PyTorch (harness/site/sitecustomize.py).
DEVICE_ENV = "SNIPPET_HARNESS_DEVICE"
#: Makes PyTorch in every run see this many GPUs (tests/harness/test_gpu_hiding.py).
FAKE_GPUS_ENV = "SNIPPET_HARNESS_FAKE_GPUS"
#: Runs the tests' one-GPU cases on the CPU, at world size 1 (tests/devices.py).
REHEARSE_ENV = "SNIPPET_HARNESS_REHEARSE"


def own_gpus(count: int) -> str:
    """CUDA_VISIBLE_DEVICES for a run on the first ``count`` GPUs of this job: taken from
    the job's own list when Slurm set one, so a test never picks a GPU it was not given."""
    owned = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = owned.split(",") if owned else [str(i) for i in range(count)]
    return ",".join(ids[:count])


def snippet(path: str | Path) -> Path:
    """Absolute path of a snippet given relative to ``snippets/``."""
    full = (SNIPPETS / path).resolve()
    if not full.is_file():
        raise FileNotFoundError(f"no snippet {full}")
    return full


class SnippetNamespace(dict):
    """A snippet's names; asking for one it does not define says which file and the fix."""

    path: str = ""

    def __missing__(self, name):
        raise KeyError(f"{self.path} defines no {name!r}, which a test asks for: rename it "
                       f"back in the snippet, or rename it in the tests and pages that name it")


def snippet_code(path: str | Path) -> dict:
    """A snippet's module namespace (its classes, functions and constants), loaded as a
    module and not as ``__main__``, so that its ``main()`` does not run."""
    names = SnippetNamespace(runpy.run_path(str(snippet(path))))
    names.path = f"snippets/{path}"
    return names


def _python_command(l: Launch, procs: list[Proc]) -> list[str]:
    """``python script.py ARGS``: the meeting point the launcher sets is what a spawning
    script defaults to (127.0.0.1:29500), so the reader sets nothing."""
    return reader_command(l, [Proc(p.name, p.argv) for p in procs])


@launcher("python", command=_python_command)
def _python(l: Launch) -> list[Proc]:
    """``python script.py``: one process; an ``mp.spawn`` script starts its own ranks."""
    return [Proc("python", [sys.executable, str(l.script), *l.args],
                 {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(l.port)})]


#: torchrun beside this Python (a virtual environment's, a module's), else the same program
#: through this Python: a centre's container need not put the script next to it.
TORCHRUN = ([str(BIN / "torchrun")] if (BIN / "torchrun").is_file()
            else [sys.executable, "-m", "torch.distributed.run"])


@launcher("torchrun")
def _torchrun(l: Launch) -> list[Proc]:
    """``torchrun --standalone --nproc_per_node=N script.py`` on one node."""
    return [Proc("torchrun", [*TORCHRUN, "--standalone",
                              f"--nproc_per_node={l.nproc}", str(l.script), *l.args])]


@launcher("torchrun-static")
def _torchrun_static(l: Launch) -> list[Proc]:
    """One torchrun agent per node, rank 0's node given by --master_addr/--master_port.

    Options ``master_addr`` (default 127.0.0.1) and ``master_port`` (default: the run's
    own free port) name another meeting point, as a reader's mistake would.
    """
    address = l.options.get("master_addr", "127.0.0.1")
    port = l.options.get("master_port", l.port)
    return [
        Proc(f"node{i}", [*TORCHRUN, f"--nnodes={l.nnodes}", f"--node_rank={i}",
                          f"--nproc_per_node={l.nproc}", f"--master_addr={address}",
                          f"--master_port={port}", str(l.script), *l.args])
        for i in range(l.nnodes)
    ]


@launcher("torchrun-c10d")
def _torchrun_c10d(l: Launch) -> list[Proc]:
    """One torchrun agent per node meeting at a c10d rendezvous endpoint."""
    return [
        Proc(f"node{i}", [*TORCHRUN, f"--nnodes={l.nnodes}",
                          f"--nproc_per_node={l.nproc}", "--rdzv_backend=c10d",
                          f"--rdzv_endpoint=127.0.0.1:{l.port}", f"--rdzv_id={l.port}",
                          str(l.script), *l.args])
        for i in range(l.nnodes)
    ]


def _with_restarts(base: str) -> Callable[[Launch], list[Proc]]:
    """The ``base`` torchrun launcher with ``--max-restarts=N`` (option ``max_restarts``)."""

    def build(l: Launch) -> list[Proc]:
        procs = LAUNCHERS[base](l)
        for proc in procs:
            proc.argv.insert(len(TORCHRUN), f"--max-restarts={l.options['max_restarts']}")
        return procs

    return build


for _base in ("torchrun", "torchrun-c10d"):  # docs/ddp/elastic.md
    launcher(f"{_base}+restarts")(_with_restarts(_base))


@launcher("torch.distributed.launch")
def _torch_distributed_launch(l: Launch) -> list[Proc]:
    """The deprecated ``python -m torch.distributed.launch`` (one node; the port is the run's own)."""
    return [Proc("launch", [sys.executable, "-m", "torch.distributed.launch",
                            f"--nproc_per_node={l.nproc}", f"--master_port={l.port}",
                            str(l.script), *l.args])]


@launcher("env")
def _env(l: Launch) -> list[Proc]:
    """One process per rank with the variables srun or mpirun would lead a job script to set."""
    world = l.nproc * l.nnodes
    procs = []
    for rank in range(world):
        procs.append(Proc(f"rank{rank}", [sys.executable, str(l.script), *l.args], {
            "RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank % l.nproc), "LOCAL_WORLD_SIZE": str(l.nproc),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(l.port),
        }))
    return procs


@launcher("mpirun")
def _mpirun(l: Launch) -> list[Proc]:
    """``mpirun -np N -x MASTER_ADDR=... -x MASTER_PORT=... python script.py``: Open MPI
    starts every rank and sets OMPI_COMM_WORLD_*; the meeting point is PyTorch's (option
    ``master=False``: none, as Horovod needs none).

    Rank 0's output is mpirun's standard output. ``--allow-run-as-root`` (added only
    when the tests run as root) and ``--oversubscribe`` (more ranks than this machine
    has cores) are the tests'; readers on a cluster's nodes need neither.
    """
    as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    meeting = (["-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={l.port}"]
               if l.options.get("master", True) else [])
    return [Proc("mpirun", ["mpirun", *as_root, "--oversubscribe", "-np", str(l.nproc * l.nnodes),
                            *meeting, sys.executable, str(l.script), *l.args])]


@launcher("bash")
def _bash(l: Launch) -> list[Proc]:
    """``bash script.sh`` in a shell where the virtual environment is active (the shell
    snippets of docs/cheatsheet.md)."""
    return [Proc("bash", ["bash", str(l.script), *l.args],
                 {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})]


#: How gloo's crash at exit shows: a process aborts while Python shuts down, after its
#: work is done, when one of gloo's worker threads frees a finished collective's tensors
#: then. Every snippet ends with the pause that prevents it (see
#: docs/troubleshooting/crashes.md); a run that shows it anyway fails, and says so.
EXIT_ABORT = re.compile(r"terminate called without an active exception")
EXIT_ABORT_MESSAGE = ("a process aborted at exit: gloo's crash at exit "
                      "(docs/troubleshooting/crashes.md)")


def _expected_ranks(name: str, nproc: int, nnodes: int) -> int | None:
    if name == "python":
        return None  # a plain script may start no ranks, or spawn its own
    return nproc if name == "torchrun" else nproc * nnodes


def shell(activate: bool = True) -> dict[str, str]:
    """PATH and VIRTUAL_ENV of a shell where the tests' virtual environment is active, or not.

    ``source .venv/bin/activate`` puts the environment's bin folder first on the
    PATH; a fresh login shell has no trace of it. Every run starts as from a shell where
    it is active, like the Slurm jobs whose module line activates it: the programs a
    snippet's libraries look up on the PATH are the same in both (DeepSpeed compiles its
    CPU operator with the first ``ninja``, once per ``ninja``, into one shared cache).
    """
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and Path(d) != BIN]
    if activate:
        return {"VIRTUAL_ENV": str(BIN.parent), "PATH": os.pathsep.join([str(BIN), *path])}
    return {"VIRTUAL_ENV": "", "PATH": os.pathsep.join(path)}


def run(
    script: str | Path,
    *args: str,
    launcher: str = "python",
    nproc: int = 1,
    nnodes: int = 1,
    world_size: int | None = None,
    env: dict[str, str | None] | None = None,
    workdir: Path | None = None,
    files: tuple[str, ...] = (),
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    **options,
) -> Result:
    """Run a snippet (path relative to ``snippets/``) and return its :class:`Result`.

    ``world_size`` is the number of ranks that must join a process group; it
    defaults to ``nproc * nnodes`` for the distributed launchers. ``files``
    (paths relative to ``snippets/``) are copied into the working directory
    first, as a reader copies a job script's companions next to it. ``env`` adds
    variables to the run's environment (None: unset that one). With
    ``check=True`` (the default) a run that failed, timed out, printed nothing
    or lost a rank raises AssertionError with every process's output tail.
    """
    path = snippet(script) if not Path(script).is_absolute() else Path(script)
    RAN.append(path)
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="snippet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copy(snippet(name), workdir)
    logs = Path(tempfile.mkdtemp(prefix="logs-", dir=workdir))
    ranks_dir = logs / "ranks"
    ranks_dir.mkdir()
    spec = Launch(path, [str(a) for a in args], nproc, nnodes, free_port(), workdir, options,
                  dict(env or {}))
    procs = LAUNCHERS[launcher](spec)
    if world_size is None:
        world_size = _expected_ranks(launcher, nproc, nnodes)

    run_id = uuid.uuid4().hex
    # What every run gets beyond the reader's own shell (a Slurm job inherits it from the
    # poller, harness/slurm.py), each for a reason that does not change what a snippet
    # prints or whether it works:
    base_env = {
        # the test session's environment, less what a reader's job lacks (NOT_THE_READERS)
        **{k: v for k, v in os.environ.items() if k not in NOT_THE_READERS},
        # a shell where the tests' virtual environment is active, as the pages tell the
        # reader to have (a job script activates its own: the sbatch launcher deactivates it)
        **shell(),
        # one thread per process: up to 4 ranks on a 2-core machine shared with other
        # test processes would otherwise each start a thread per core and slow the suite
        # many times over (torchrun sets the same itself for several workers;
        # tests/harness/test_launch.py runs a snippet without it)
        "OMP_NUM_THREADS": "1",
        # sitecustomize.py: notes which ranks joined, hides the GPUs from a CPU test
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE_DIR), os.environ.get("PYTHONPATH")])),
        # where sitecustomize.py notes the ranks; the tags that find leftover processes
        "SNIPPET_HARNESS_RANKS_DIR": str(ranks_dir),
        SESSION_TAG: SESSION_ID,
        RUN_TAG: run_id,
        **(env or {}),
    }
    started = time.monotonic()
    popens = []
    files = []
    try:
        for i, p in enumerate(procs):
            out = open(logs / f"{i}.out", "w+b")
            err = open(logs / f"{i}.err", "w+b")
            files.append((out, err))
            popens.append(subprocess.Popen(
                p.argv, cwd=workdir, stdout=out, stderr=err,
                env={k: v for k, v in {**base_env, **p.env}.items() if v is not None},
                stdin=subprocess.DEVNULL, start_new_session=True))
        timed_out = _wait(popens, started + timeout)
    finally:
        for p in popens:
            _kill_group(p)
        kill_tagged(RUN_TAG, run_id)
    seconds = time.monotonic() - started

    outputs = []
    for p, proc, (out, err) in zip(popens, procs, files):
        out.seek(0)
        err.seek(0)
        outputs.append(Output(proc.name, p.returncode,
                              without_gloo_notes(out.read().decode(errors="replace")),
                              err.read().decode(errors="replace")))
        out.close()
        err.close()
    codes = [p.returncode for p in popens]
    returncode = next((c for c in codes if c), 0)
    ranks = {int(f.name) for f in ranks_dir.iterdir()}
    result = Result(path, launcher, returncode, timed_out, seconds, outputs, ranks, workdir,
                    command_of(spec, procs, launcher), meeting_port(spec))
    _log_launch(result, len(procs), world_size)
    if check:
        problems = []
        if not result.ok:
            problems.append("the run failed")
        if not any(o.stdout.strip() for o in outputs):
            problems.append("it printed nothing on stdout")
        if world_size is not None and ranks != set(range(world_size)):
            problems.append(f"ranks {sorted(set(range(world_size)) - ranks)} never joined "
                            f"the process group (expected {world_size})")
        if problems:
            raise AssertionError("; ".join(problems) + "\n" + result.report())
    return result


#: Variables of the shell the tests run from that a reader's job does not have, which no
#: run and no job gets. PYTHONUNBUFFERED=1: a reader's Python buffers what it prints to a
#: file (a job's output file, a pipe) and loses the buffer when it is killed; a snippet
#: whose output only shows unbuffered works only in the tests
#: (tests/harness/test_launch.py::test_no_run_is_unbuffered).
NOT_THE_READERS = ("PYTHONUNBUFFERED",)


def _log_launch(result: Result, processes: int, world_size: int | None) -> None:
    """With SNIPPET_HARNESS_LAUNCH_LOG=file, add a JSON line per launch (the test, what
    ran, how long): set it for a test run to see where the suite spends its time."""
    log = os.environ.get("SNIPPET_HARNESS_LAUNCH_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        with open(log, "a") as f:
            f.write(json.dumps({"test": test, "script": result.script.name,
                                "launcher": result.launcher, "processes": processes,
                                "ranks": world_size, "seconds": round(result.seconds, 2)}) + "\n")


def _wait(popens: list[subprocess.Popen], deadline: float) -> bool:
    """Wait for every process; stop the rest soon after one fails. True on timeout."""
    failed_at = None
    while True:
        codes = [p.poll() for p in popens]
        if all(c is not None for c in codes):
            return False
        now = time.monotonic()
        if failed_at is None and any(c for c in codes):
            failed_at = now
        if now > deadline:
            return True
        if failed_at is not None and now - failed_at > FAILURE_GRACE:
            return False
        time.sleep(0.05)


def _kill_group(p: subprocess.Popen) -> None:
    """SIGTERM the process group, give it 3 s, then SIGKILL whatever is left of it."""
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, None)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def tagged_pids(tag: str, value: str) -> list[int]:
    """PIDs of processes whose environment holds ``tag=value``."""
    needle = f"{tag}={value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def kill_tagged(tag: str, value: str) -> list[int]:
    """Kill every process carrying ``tag=value`` and wait until they are gone.

    Returns the PIDs that were still there.
    """
    pids = tagged_pids(tag, value)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"

