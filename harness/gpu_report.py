"""The report of a GPU test run, and the record of GPU runs the site shows.

``pytest --gpu-report=DIR`` (``make test-gpu`` passes it) writes, when the session ends,
``DIR/report.json`` and ``DIR/report.md``: the machine, its GPUs, the releases of
PyTorch, CUDA and NCCL, and every test with its outcome, the reason of each skip and the
output of each failure. A maintainer reads the Markdown file and commits both.

``python -m harness.gpu_report record DIR`` adds such a report to
``docs/_data/gpu_runs.json``, the record from which each page says whether its scripts
have run on GPUs, on which and when: a snippet counts as run on GPUs when every test of
its test file that ran there passed, and at least one did.
"""

from __future__ import annotations

import datetime
import json
import platform
import socket
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":  # run as `python harness/gpu_report.py`: import the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest

from harness import launch, torch_versions
from harness.launch import ROOT, SNIPPETS
from harness.plugins.strictness import skip_reason

RECORD = ROOT / "docs" / "_data" / "gpu_runs.json"
#: The most characters of a failure's output a report keeps (its end).
FAILURE_CHARS = 12000

PROBE = """
import json, torch
cuda = torch.cuda.is_available()
nccl = torch.cuda.nccl.version() if cuda and torch.distributed.is_nccl_available() else None
print(json.dumps({
    "torch": torch.__version__,
    "cuda": torch.version.cuda, "hip": torch.version.hip,
    "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
    "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
}))
"""


def machine() -> dict:
    """The machine, its GPUs and releases, asked of a subprocess (pytest's own process
    never initialises CUDA)."""
    found = {"host": socket.gethostname(), "python": platform.python_version(),
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           timeout=300)
    try:
        found |= json.loads(probe.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        found["probe_error"] = (probe.stdout + probe.stderr)[-2000:]
    return found


def gpus_text(info: dict) -> str:
    """``1 × NVIDIA H100 80GB HBM3``, or ``no GPU``."""
    gpus = info.get("gpus") or []
    names = sorted(set(gpus))
    return " + ".join(f"{gpus.count(n)} × {n}" for n in names) if names else "no GPU"


class Recorder:
    """Collects every test's outcome in the process that runs the session."""

    def __init__(self, folder: Path, args: list[str]):
        self.folder, self.args = folder, args
        self.tests: dict[str, dict] = {}

    def pytest_collectreport(self, report):
        if report.failed:
            self.tests[report.nodeid or "collection"] = {
                "outcome": "error", "when": "collect", "seconds": 0.0,
                "output": str(report.longrepr)[-FAILURE_CHARS:]}
        elif report.skipped:  # a whole module, e.g. for want of a package
            self.tests[report.nodeid] = {"outcome": "skipped", "seconds": 0.0, "gpu": False,
                                         "reason": skip_reason(report)}

    def pytest_runtest_logreport(self, report):
        test = self.tests.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0,
                                                     "gpu": "multigpu" in report.keywords})
        test["seconds"] = round(test["seconds"] + report.duration, 2)
        ran = dict(report.user_properties).get("snippets")
        if ran:
            test["snippets"] = ran
        if report.skipped:
            test.update(outcome="skipped", reason=skip_reason(report))
        elif report.failed:
            sections = "\n".join(f"--- {name} ---\n{text}" for name, text in report.sections)
            test.update(outcome="failed" if report.when == "call" else "error", when=report.when,
                        output=(report.longreprtext + "\n" + sections)[-FAILURE_CHARS:])

    def pytest_sessionfinish(self, session, exitstatus):
        write(self.folder, {"machine": machine(), "command": self.args,
                            "exit status": int(exitstatus), "tests": self.tests})


@pytest.fixture(autouse=True)
def _snippets_it_ran(request):
    """Which snippets the test started (harness.launch.RAN), sent with its report."""
    launch.RAN.clear()
    yield
    ran = sorted({str(p.relative_to(SNIPPETS)) for p in launch.RAN if p.is_relative_to(SNIPPETS)})
    request.node.user_properties.append(("snippets", ran))


def pytest_addoption(parser):
    parser.addoption("--gpu-report", metavar="DIR",
                     help="write DIR/report.json and DIR/report.md: the machine, its GPUs "
                          "and releases, and every test's outcome (make test-gpu)")


def pytest_configure(config):
    folder = config.getoption("gpu_report", None)
    if folder and not hasattr(config, "workerinput"):  # not in pytest-xdist's workers
        config.pluginmanager.register(Recorder(Path(folder), list(config.invocation_params.args)),
                                      "gpu-report")


def counts(tests: dict) -> dict[str, int]:
    found: dict[str, int] = {}
    for test in tests.values():
        found[test["outcome"]] = found.get(test["outcome"], 0) + 1
    return found


def markdown(report: dict) -> str:
    info, tests = report["machine"], report["tests"]
    lines = [f"# GPU test run, {info['date']}", "",
             f"- Machine: `{info['host']}`, {gpus_text(info)}",
             f"- PyTorch {info.get('torch')}, CUDA {info.get('cuda')}, NCCL {info.get('nccl')}, "
             f"Python {info['python']}",
             f"- Command: `pytest {' '.join(report['command'])}`",
             "- Outcome: " + ", ".join(f"{n} {o}" for o, n in sorted(counts(tests).items())), ""]
    if "probe_error" in info:
        lines += ["PyTorch could not be asked about the GPUs:", "", "```", info["probe_error"],
                  "```", ""]
    lines += ["| test | outcome | seconds | reason |", "| --- | --- | --- | --- |"]
    for nodeid, test in sorted(tests.items()):
        reason = test.get("reason", "").replace("|", "\\|")
        lines.append(f"| `{nodeid}` | {test['outcome']} | {test['seconds']} | {reason} |")
    for nodeid, test in sorted(tests.items()):
        if "output" in test:
            lines += ["", f"## {test['outcome']}: `{nodeid}`", "", "```", test["output"], "```"]
    return "\n".join(lines) + "\n"


def write(folder: Path, report: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (folder / "report.md").write_text(markdown(report))


def runs_of(report: dict) -> dict[str, dict]:
    """What a report says of each snippet: its GPU tests passed, failed and skipped (the
    tests not marked multigpu ran on the CPU). A test counts for the snippets it started;
    one that started none itself (skipped, or reading a run another test made) counts for
    the snippets its file is named after."""
    info = report["machine"]
    runs: dict[str, dict] = {}
    for nodeid, test in report["tests"].items():
        if not test.get("gpu", True):  # a collection error counts against its file
            continue
        outcome = "failed" if test["outcome"] == "error" else test["outcome"]
        for snippet in test.get("snippets") or torch_versions.snippets_of(nodeid.split("::")[0]):
            run = runs.setdefault(snippet, {"date": info["date"][:10], "gpus": gpus_text(info),
                                            "torch": info.get("torch"), "passed": 0,
                                            "failed": 0, "skipped": 0})
            run[outcome] += 1
    return runs


def record(folder: Path, path: Path = RECORD) -> dict:
    """Add the report in ``folder`` to the record: for each snippet its latest GPU run in
    which a test of it ran (a run that only skipped it keeps the one before)."""
    runs = {snippet: run for snippet, run in runs_of(json.loads((folder / "report.json")
                                                                .read_text())).items()
            if run["passed"] + run["failed"]}
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(runs)
    path.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
    return runs


def ran_on_gpus(run: dict | None) -> bool:
    """A snippet has run on GPUs when its tests there passed, none failed."""
    return bool(run) and run["passed"] > 0 and run["failed"] == 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"] or len(sys.argv) != 3:
        sys.exit("usage: python -m harness.gpu_report record DIR")
    added = record(Path(sys.argv[2]))
    failed = sorted(snippet for snippet, run in added.items() if not ran_on_gpus(run))
    print(f"{RECORD.relative_to(ROOT)}: {len(added) - len(failed)} snippets passed their GPU "
          f"tests in this report" + (f"; these failed: {', '.join(failed)}" if failed else ""))
