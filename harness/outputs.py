"""Output that pages show, captured from real runs into files beside the snippets.

A test calls :func:`check_output` with a run's result. Normally this compares the
run's standard output with ``snippets/<chapter>/<name>.out`` (or
``<name>.<variant>.out``); with ``UPDATE_OUTPUTS=1`` in the environment
(``make outputs``) it writes the file instead. The pages literal-include these
files, so what a reader sees is what the last capture printed.

The comparison is by meaning, token by token, and this module is the one place
that decides what may differ between two runs:

* Words, punctuation, integers (counts, shapes, ranks, sizes) must be equal.
* Floating-point numbers must agree within a :class:`Tolerance`. Another CPU, another
  choice of kernels (``ATEN_CPU_CAPABILITY=default``) or a GPU changes the last
  digits, and a printed number is rounded, so one unit of its last printed digit is
  always allowed on top of the tolerance.
* What cannot be the same on two machines or two runs is masked before comparing:
  durations and speeds, ports, process and job ids, paths, this machine's host name,
  source line numbers, the release of torch and its virtual environment (:data:`MASKS`),
  and, for named output files only, the few
  measured figures that follow from timing (:data:`VARYING`).
* Runs of spaces count as one (columns are right-aligned to their widest figure).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from harness.launch import DEVICE_ENV, SNIPPETS, Result, as_reader_port, snippet

# --- What is masked -----------------------------------------------------------------------

#: (pattern, replacement) pairs applied to both sides of every comparison, in this order.
MASKS: list[tuple[str, str]] = [
    # srun's notes when a job step waits for the previous one to release the nodes
    (r"(?m)^srun: (Job \d+ step creation temporarily disabled|Step created for job \d+).*\n",
     ""),
    # durations and speeds: 1.2 s, 350 ms, 12.5 samples/s, 0:00:03
    (r"\b\d+(\.\d+)?(e[-+]?\d+)? ?(s|ms|us|µs|sec|seconds|samples/s|it/s)\b", "<time>"),
    (r"\[W\d{4} [\d:.]+ ", "[W<time> "),  # c10d's warning prefix: [W1124 05:23:01.123 ...
    # ports, process ids and Slurm job ids
    (r"\b(port|pid|PID)[ =:]+\d+", r"\1 <n>"),
    (r"(127\.0\.0\.1|localhost|\.invalid)\]?[:,] ?\d{2,5}\b", r"\1:<port>"),
    (r"\]:\d{2,5}\b", "]:<port>"),
    (r"\bjob \d+", "job <id>"),
    # source line numbers: file.py:164, pair.cc:446, line 12
    (r"\b([\w.-]+\.(py|cc|cpp|h)):\d+", r"\1:<line>"),
    (r"\bline \d+\b", "line <n>"),
    # paths: a file named by its full path is named by its file name
    (r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)", r"\1"),
    # the release of torch and the virtual environment it is in (make test TORCH=2.X.Y)
    (r"\b(PyTorch|torch) \d+\.\d+\.\d+(\+\w+)?", r"\1 <release>"),
    (r"\.venv-torch-\d+\.\d+\.\d+\b", ".venv"),
    # make says where it runs when a make started it, and shows how it creates .venv
    (r"(?m)^make\[\d+\]: (Entering|Leaving) directory .*\n", ""),
    (r"(?m)^(test -x \.venv|\.venv/bin/pip install|touch \.venv).*\n", ""),
]

#: How gloo reports a collective that a peer never joined, or left. Which side notices
#: first is a race: a receive or a send that timed out, or a connection the other side
#: already closed.
GLOO_ERROR = (r"Timed out waiting \S+ for (send|recv) operation to complete"
              r"|Connection closed by peer|Read error|Connection reset by peer")

#: What torch 2.13 warns on rank 0 when dist.barrier() under NCCL has to guess the GPU.
BARRIER_WARNING = "barrier(): using the device under current context"
#: How far weights trained on GPUs may be from the CPU reference, or from another GPU
#: run: the same maths in other kernels.
GPU_ATOL = 1e-4

#: srun's line about a failed task, which reaches a job's output file before or after the
#: task's own traceback.
SRUN_TASK_0_FAILED = (r"(?m)^srun: error: node[12]: task 0: Exited with exit code 1\n", "",
                      "srun's line and the traceback arrive in either order")

#: Figures that follow from timing or from the machine, per output file (relative to
#: snippets/, with ``*`` for any variant): (pattern, replacement, why). Everything else
#: in these files is still compared.
VARYING: dict[str, list[tuple[str, str, str]]] = {
    "ddp/monitoring*.out": [
        (r"[\d.]+ MiB", "<n> MiB", "resident memory depends on the allocator")],
    "model_parallel/pipeline_bubble.out": [
        (r"(?m)^(\S+ +\d+ +\S+ +)\d+\.\d%", r"\1<measured>", "idle share measured by a clock")],
    "model_parallel/pipeline_interleaved.out": [
        (r"(?m)^(\S+ +\d +\d+ +\S+ +)\d+\.\d%", r"\1<measured>", "idle share measured by a clock")],
    "performance/channels_last.out": [
        (r"\d+\.\d+x", "<ratio>", "ratio of two timings")],
    "performance/data_loading.out": [
        (r"\d+ CPUs usable", "<n> CPUs usable", "depends on the machine")],
    "performance/profiling.out": [
        (r"\d+%", "<share>", "share of measured time")],
    "performance/scaling.out": [
        (r"\d+\.\d\dx", "<speed-up>", "ratio of two timings"),
        (r"\d+%", "<efficiency>", "ratio of two timings")],
    "slurm/preemptible.out": [
        (r"step \d+", "step <n>", "the step at which the signal arrives"),
        (r"(?m)^epoch .*\n", "", "how far training got before the signal")],
    "slurm/wrong_python.out": [SRUN_TASK_0_FAILED],
    "slurm/no_local_rank.out": [SRUN_TASK_0_FAILED],
    "slurm/gpu_tests.out": [
        (r"(?m)^SKIPPED .*\n", "", "the list of GPU tests grows with the guide"),
        (r"(?m)^[s.]+ *\[ *\d+%\]\n", "", "one character per test"),
        (r"\d+ skipped", "<n> skipped", "the number of GPU tests (the test checks it against "
                                         "the reasons listed)"),
        (r"\d+ deselected", "<n> deselected", "the number of tests that need no GPU")],
    "troubleshooting/*.out": [
        (f"(?:{GLOO_ERROR}).*", "<gloo error>", "which side of a broken collective notices first"),
        (r"\[(?:[\w./]*/)?(pair|unbound_buffer)\.cc:<line>\]", "[<gloo source>]",
         "which part of gloo notices first (releases before 2.6 print its path)")],
    "troubleshooting/crash.summary.out": [
        (r"(?m)^(  time +: ).*$", r"\1<time>", "when it ran"),
        (r"(?m)^(  host +: ).*$", r"\1<host>", "the machine's name")],
    "troubleshooting/crash.faulthandler.out": [
        (r"(?m)^Thread 0x[0-9a-f]+ \(most recent call first\):\n +<no Python frame>\n\n?", "",
         "a thread Python knows that runs no Python code: whether a library (gloo, NCCL) has "
         "one yet when the rank crashes"),
        (r"thread 0x[0-9a-f]+", "thread <id>", "a thread's address"),
        (r"(?m)^Extension modules: .*$", "Extension modules: <list>",
         "which compiled modules numpy and torch load")],
    "troubleshooting/allreduce_bw.out": [
        (r"[\d.]+ GB/s", "<n> GB/s", "bandwidth measured with a clock")],
    "recipes/silent_job*.out": [
        (r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b", "<date>", "when it ran"),
        (r"\bat \d\d:\d\d:\d\d\b", "at <time>", "when it ran"),
        (r"RunTime=\S+", "RunTime=<time>", "Slurm checks time limits every few seconds"),
        (r"\b(JOB|STEP|StepId=)( ?)\d+", r"\1\2<id>", "the job's id"),
        (r"silent_job(_buffered)?-\d+", r"silent_job\1-<id>", "the job's id"),
        (r"(?m)^rank \d+ on node[12]\b", "rank <n> on <node>",
         "the ranks' lines arrive in any order"),
        (r"\bnode[12]\b", "node<n>", "which node Slurm reports from")],
    "recipes/silent_job.err.out": [
        (r"(?m)^slurmstepd-node<n>: error: \*\*\* (JOB|STEP) .* DUE TO TIME LIMIT \*\*\*\n",
         "", "the job's and its step's lines come in either order (the test checks them)"),
        (r"(?m)^srun: .*\n", "", "which lines srun prints as its tasks end, in which order, "
                                "depends on when each task ends (the test checks them)")],
    "troubleshooting/hang.out": [
        (r"hang-\d+\.out", "hang-<job id>.out", "the job's id")],
    "troubleshooting/dump_stacks.out": [
        (r"\bThread \d+", "Thread <pid>", "process ids"),
        (r"dump_stacks\.sh \d+", "dump_stacks.sh <job id>", "the job's id")],
    "ddp/train.diff.out": [
        (r"(?m)^((?:---|\+\+\+) \S+)\t.*$", r"\1", "when the files were last changed")],
    "ddp/topology*.out": [
        (r"(?m)^  host (\d+): \S+$", r"  host \1: <host>", "the machine's name"),
        (r"(?m)\d+ of \d+$", "<n> of <n>", "CPUs usable depend on the machine")],
    "ddp/legacy_launch*.out": [
        (r"--local-rank=\d", "--local-rank=<n>", "which process reports first")],
    "recipes/production.out": [
        (r"data-\d+-", "data-<job id>-", "the job's id names the nodes' local folders"),
        (r"epoch \d+, step \d+", "epoch <n>, step <n>", "the step at which the signal arrives"),
        (r"(?m)^epoch .*\n", "", "how far training got before the signal"),
        (r"\bnode[12]\b", "node<n>", "which node starts or copies first")],
    "slurm/stage_data.out": [
        (r"data-\d+-", "data-<job id>-", "the job's id names the nodes' local folders")],
    "slurm/environment.out": [
        (r"torch \d\S*", "torch <version>", "the build of torch (+cpu, +cu128...)")],
    # after the entries above that name a node: which free node a job gets, which node's
    # torchrun starts or joins first
    "slurm/*.out": [
        (r"\bnode[12]\b", "node<n>", "which of the free nodes Slurm picks, or starts first")],
    "model_parallel/hybrid_*.out": [
        (r"(?m)^((?: +\d+){3,4}) +\S+(?= +\d+-\d+ )", r"\1 <node>",
         "the machine's name, in the node column of the table of ranks")],
    "model_parallel/*.slurm.out": [
        (r"\bnode[12]\b", "node<n>", "which node's torchrun joins the rendezvous first, and "
                                     "so holds ranks 0 and up")],
}

#: Output files whose only figures are listed in VARYING, and why that is right.
WITHOUT_FIGURES = {
    "slurm/gpu_tests.out": "its figures count the GPU tests, which grow with the guide; "
                           "its test checks the count against the reasons listed",
    "ddp/legacy_launch.launch.out": "an error message; its one figure is the rank that "
                                    "reported first",
    "recipes/silent_job.err.out": "Slurm's lines at the time limit, in an order that varies "
                                  "from run to run; its test asserts each of them",
}

# --- How numbers compare ------------------------------------------------------------------

#: A token: a number (with its sign, where it is not part of a range like 0-1), or a
#: run of other characters. Spaces separate tokens.
_TOKEN = re.compile(r"(?P<num>(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\d+(?:\.\d+)?"
                    r"(?:[eE][-+]?\d+)?)|(?P<text>[^\s\d]+|\d)")
#: No declared tolerance may be looser than this: a wrong number must still fail.
LOOSEST = 0.05


@dataclass(frozen=True)
class Tolerance:
    """How far a printed floating-point number may be from the captured one.

    ``|a - b| <= rtol * max(|a|, |b|) + atol + one unit of the last printed digit``.
    The default is what fp32 runs meet on different CPUs, kernel choices and GPUs;
    a test that needs looser declares it, with the reason (``why``) in one line.
    """

    rtol: float = 1e-3
    atol: float = 1e-6
    why: str = "fp32: the last digits depend on the CPU, its kernels or the GPU"

    def __post_init__(self):
        if not (0 <= self.rtol <= LOOSEST and 0 <= self.atol <= LOOSEST):
            raise ValueError(f"a tolerance looser than {LOOSEST} hides wrong numbers: {self}")
        if not self.why.strip() or "\n" in self.why:
            raise ValueError("a tolerance states its reason in one line (why=...)")

    def allows(self, expected: str, actual: str) -> bool:
        a, b = float(expected), float(actual)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= self.rtol * max(abs(a), abs(b)) + self.atol + max(
            _last_digit(expected), _last_digit(actual))


def _last_digit(number: str) -> float:
    """The value of one unit of the last printed digit: 0.0001 for 0.1715, 1e-9 for 1.2e-08."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _is_float(token: str) -> bool:
    return "." in token or "e" in token.lower()


FP32 = Tolerance()
#: For snippets that compute in half precision (what a test declares for them).
BF16 = Tolerance(rtol=1e-2, why="bf16 keeps 8 significant bits: kernels round differently")
FP16 = Tolerance(rtol=1e-2, why="fp16 keeps 11 significant bits: kernels round differently")


def tokens(line: str) -> list[tuple[str, str]]:
    """(kind, text) of each token of a line: kind "num" or "text"."""
    return [(m.lastgroup, m[0]) for m in _TOKEN.finditer(line)]


def line_difference(expected: str, actual: str, tolerance: Tolerance) -> str | None:
    """Why two (masked) lines differ in meaning, or None if they agree."""
    want, got = tokens(expected), tokens(actual)
    if [k for k, _ in want] != [k for k, _ in got]:
        return "the words or the number of figures differ"
    for (kind, a), (_, b) in zip(want, got):
        if kind == "text" and a != b:
            return f"{a!r} became {b!r}"
        if kind == "num" and a != b:
            if not (_is_float(a) and _is_float(b)):
                return f"the integer {a} became {b} (integers compare exactly)"
            if not tolerance.allows(a, b):
                return (f"{a} became {b}: more than the tolerance (rtol {tolerance.rtol}, "
                        f"atol {tolerance.atol}, plus one unit of the last digit; "
                        f"{tolerance.why})")
    return None


# --- Masks and comparison -----------------------------------------------------------------

def varying(path: Path) -> list[tuple[str, str, str]]:
    """The :data:`VARYING` entries that apply to an output file."""
    path = path.resolve()
    if not path.is_relative_to(SNIPPETS):
        return []
    name = path.relative_to(SNIPPETS).as_posix()
    return [entry for pattern, entries in VARYING.items()
            if Path(name).match(pattern) for entry in entries]


#: This machine's name, masked wherever a run prints it.
HOST = socket.gethostname()


def mask(text: str, path: Path | None = None) -> str:
    """``text`` with :data:`MASKS` (and the file's :data:`VARYING` figures) replaced."""
    pairs = [*MASKS, *((p, r) for p, r, _ in (varying(path) if path else ()))]
    for pattern, repl in pairs:
        text = re.sub(pattern, repl, text)
    if HOST:
        text = re.sub(rf"\b{re.escape(HOST)}\b", "<host>", text)
    return text


def differences(expected: str, actual: str, path: Path | None = None,
                tolerance: Tolerance = FP32) -> list[str]:
    """What differs in meaning between a captured output and a new run, line by line
    (empty when they agree)."""
    want = [" ".join(line.split()) for line in mask(expected, path).splitlines()]
    got = [" ".join(line.split()) for line in mask(actual, path).splitlines()]
    want = [line for line in want if line]
    got = [line for line in got if line]
    if len(want) != len(got):
        diff = difflib.unified_diff(want, got, "captured", "this run", lineterm="", n=1)
        return [f"{len(want)} lines captured, {len(got)} in this run", *diff]
    problems = []
    for number, (a, b) in enumerate(zip(want, got), 1):
        why = line_difference(a, b, tolerance)
        if why:
            problems.append(f"line {number}: {why}\n  captured: {a}\n  this run: {b}")
    return problems


def output_path(script: Path, variant: str | None = None) -> Path:
    suffix = f".{variant}.out" if variant else ".out"
    return script.with_name(script.stem + suffix)


def check_output(result: Result, variant: str | None = None,
                 tolerance: Tolerance = FP32) -> None:
    """Compare (or, with UPDATE_OUTPUTS=1, record) the run's stdout and its command with
    its .out file.

    Rule: A run prints what its captured output shows, under the command that ran it: the
    same words and integers, floating-point figures within the test's tolerance. Fix:
    `make check SNIPPET=<chapter>/<name>.py` recaptures it; review `git diff snippets/`."""
    check_text(result.stdout, result.script, variant, tolerance, command=result.command,
               port=result.port)


def _name(path: Path) -> str:
    path = path.resolve()
    return path.relative_to(SNIPPETS).as_posix() if path.is_relative_to(SNIPPETS) else str(path)


# --- The command above the output ---------------------------------------------------------

#: What starts each line of the command at the top of an output file.
PROMPT = "$ "


def split_command(text: str) -> tuple[list[str], str]:
    """The command lines at the top of an output file (without their prompt), and the
    output below them."""
    lines = text.splitlines(keepends=True)
    count = next((i for i, line in enumerate(lines) if not line.startswith(PROMPT)), len(lines))
    return [line[len(PROMPT):].rstrip("\n") for line in lines[:count]], "".join(lines[count:])


def with_command(command: list[str], output: str) -> str:
    """An output file's text: the command, one ``$ `` line per process it starts, then
    what it printed."""
    return "".join(f"{PROMPT}{line}\n" for line in command) + output


#: Output files that show no command, and why: what they show is not what one command
#: printed (relative to snippets/).
WITHOUT_COMMAND = {
    "basics/notebook.out": "a notebook's cells, run one after the other in Jupyter",
    "tools/estimate_memory.validation.out": "a table that puts runs at 1, 2 and 4 ranks "
                                            "beside the estimates",
    "frameworks/ddp_from_horovod.compare.out": "a table that compares what two runs saved",
}


def _fix() -> str:
    """The command that recaptures the outputs of the test running now: ``make check`` for
    the snippet its file mirrors (tests/<chapter>/test_<name>.py)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    parts = Path(test).parts
    if len(parts) == 3 and parts[2].startswith("test_"):
        stem = parts[2][len("test_"):-len(".py")]
        found = [p for p in sorted((SNIPPETS / parts[1]).glob(f"{stem}.*"))
                 if p.stem == stem and p.suffix != ".out"]
        if found:
            return f"make check SNIPPET={parts[1]}/{found[0].name}"
    return f"make outputs PYTEST_ARGS={test or '<its test file>'}"


def command_difference(captured: list[str], ran: list[str], path: Path) -> str | None:
    """Why the command an output file shows is not the command that ran (paths, ports and
    host names masked), or None."""
    if not captured and not ran and _name(path) in WITHOUT_COMMAND:
        return None
    if not ran:
        return f"no command printed it: say why in WITHOUT_COMMAND ({__name__})"
    if not captured:
        return f"it shows no command: run `{_fix()}`"
    want = [" ".join(mask(line, path).split()) for line in captured]
    got = [" ".join(mask(line, path).split()) for line in ran]
    if want != got:
        return ("the command it shows is not the command that ran\n"
                + "\n".join(f"  shown: $ {line}" for line in captured)
                + "\n" + "\n".join(f"  ran:   $ {line}" for line in ran))
    return None


#: Node ids of the tests that compared an output with floating-point figures in this
#: process (conftest.py keeps them, so that ``--only-compared`` can run exactly those
#: again on other CPU kernels: the kernels change how floating-point figures round; an
#: output of words and integers alone is compared exactly by the first run).
COMPARED: set[str] = set()


def has_floats(text: str, path: Path | None = None) -> bool:
    """Whether an output shows a floating-point figure once it is masked (a duration,
    masked, does not count)."""
    return any(kind == "num" and _is_float(token)
               for line in mask(text, path).splitlines() for kind, token in tokens(line))


def rendered_for_another_centre(path: Path) -> bool:
    """Whether ``path`` is a job script that runs here rendered for a centre profile other
    than the default (``CENTRE``), whose output the pages never show. The one place the
    core reaches the centre profiles (harness/profile.py), an optional part."""
    from harness import profile

    return profile.needs_rendering(path) and not profile.load().is_default


def check_text(actual: str, script: str | Path, variant: str | None = None,
               tolerance: Tolerance = FP32, job: str | Path | None = None, *,
               command: str | list[str], port: int | None = None) -> None:
    """As :func:`check_output`, for text other than a run's stdout (error lines, a diff, a
    table the test builds from a run) shown from ``<script stem>[.variant].out``, below
    ``command`` (the reader's command that printed it, a line per process it starts).

    ``script`` is a path, or a name relative to ``snippets/``. The pages show the runs of
    job scripts rendered for the default centre profile: under another profile
    (``CENTRE``), a job script's output is not compared (its test asserts what the job
    did instead) and never recorded; nor is what another script printed about a job
    (``job``: that job's script).

    ``UPDATE_OUTPUTS=1`` records the run, with the run's ``port`` written as the command
    shows it (harness.launch.READER_PORT); ``UPDATE_OUTPUTS=commands`` records only the
    command, after the output has compared as usual.
    """
    command = [command] if isinstance(command, str) else list(command)
    if rendered_for_another_centre(snippet(job or script)):
        assert os.environ.get("UPDATE_OUTPUTS") in (None, ""), (
            "outputs are captured with the default centre profile: unset CENTRE")
        return
    path = output_path(snippet(script), variant)
    shown, captured = (split_command(path.read_text()) if path.exists() else ([], None))
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current and captured is not None and has_floats(captured, path):
        COMPARED.add(current.rsplit(" (", 1)[0])
    update = os.environ.get("UPDATE_OUTPUTS")
    if update:
        assert os.environ.get(DEVICE_ENV) == "cpu", (
            f"{path.name}: the pages show CPU runs; a test with GPUs never rewrites them")
    if update == "1":
        path.write_text(with_command(command, as_reader_port(actual, port)))
        return
    assert captured is not None, f"{path} is missing: run `{_fix()}` to capture it"
    name = _name(path)
    problems = differences(captured, actual, path, tolerance)
    if problems:
        raise AssertionError(
            f"the output shown on the page ({name}) has drifted; "
            f"run `{_fix()}` if the change is right\n" + "\n".join(problems))
    if update == "commands":
        path.write_text(with_command(command, captured))
        return
    why = command_difference(shown, command, path)
    if why:
        raise AssertionError(f"{name}: {why}")
