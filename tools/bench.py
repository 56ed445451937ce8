"""Where the time goes: site build times, the cost of one launch, and the test suite.

    make bench                 # all of it (the suite takes minutes)
    make bench ARGS=--quick    # without the test suite

Prints one line per measurement. Builds are in CPU seconds of sphinx-build (user + sys,
best of a few runs: other work on the machine changes them far less than wall time), each
followed by the CPU seconds of one more, sampled build by extension (what each
extension's code and the code it calls took) and, for the rest, by phase of Sphinx.
Launches are in seconds of wall time (best of a few); the suite runs once, as `make test`
runs it, and its 10 slowest tests follow. The seconds each test file took go to
tests/file_seconds.json: a clone that has not run the tests yet starts the slowest files
first by them.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELLO = """\
import torch.distributed as dist
dist.init_process_group("gloo")
print("hello from rank", dist.get_rank())
dist.destroy_process_group()
"""


def seconds(command, repeat=1, **kwargs):
    best = float("inf")
    for _ in range(repeat):
        start = time.monotonic()
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT, **kwargs)
        best = min(best, time.monotonic() - start)
    return best


SPHINX = [str(Path(sys.executable).parent / "sphinx-build"), "-W", "-n", "-q", "-b", "html",
          "docs"]


def cpu_seconds(command) -> float:
    """CPU seconds (user + sys) of a command and the processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


#: Where a frame's code lives -> who owns its time: the site's extensions and the
#: packages conf.py loads. Sphinx, docutils, Jinja and the standard library own none:
#: their time goes to the extension that called them, else to the phase of Sphinx.
OWNERS = {str(ROOT / "docs" / "_ext") + "/": "docs/_ext/{}",
          str(ROOT / "docs" / "_diagrams") + "/": "docs/_diagrams",
          str(ROOT / "docs" / "conf.py"): "docs/conf.py"}
PACKAGES = {"myst_parser": "myst_parser", "markdown_it": "myst_parser",
            "mdit_py_plugins": "myst_parser", "sphinx_design": "sphinx_design",
            "sphinx_copybutton": "sphinx_copybutton", "sphinx_togglebutton": "sphinx_togglebutton",
            "sphinx_exercise": "sphinx_exercise", "sphinx_book_theme": "theme",
            "pydata_sphinx_theme": "theme", "sphinxcontrib/spelling": "sphinxcontrib.spelling",
            "sphinx/ext/": "sphinx.ext.*"}
#: Functions of Sphinx that start a phase of the build, innermost first.
PHASES = {"_init_env": "load the saved environment", "write_doctree": "save doctrees",
          "read_doc": "read pages (docutils, Sphinx's transforms)",
          "index_page": "search index", "dump_search_index": "search index",
          "handle_page": "page templates", "get_doctree": "load doctrees",
          "write_doc": "write HTML (docutils, Sphinx)",
          "copy_download_files": "copy files", "copy_static_files": "copy files",
          "check_consistency": "check consistency", "assign_figure_numbers": "number figures",
          "application.py:__init__": "start: imports, configuration, extensions' setup"}


def _owner(filename: str, cache: dict = {}) -> str | None:  # noqa: B006 (a cache)
    if filename not in cache:
        found = None
        for where, name in OWNERS.items():
            if filename.startswith(where):
                found = name.format(Path(filename).stem)
        for package, name in PACKAGES.items():
            if f"site-packages/{package}" in filename:
                found = name
        cache[filename] = found
    return cache[filename]


def sampled_build(out: str, interval: float = 0.002) -> None:
    """Build the site in this process, sampling the stack every `interval` of CPU time,
    and print the CPU seconds of each extension and phase, most first: a sample takes
    the CPU time since the one before (signals that come during one long call of C code
    arrive as one)."""
    import signal

    from sphinx.cmd.build import build_main

    seconds: dict[str, float] = {}
    last = [time.process_time()]

    def sample(_signum, frame):
        now = time.process_time()
        phase = None
        while frame is not None:
            code = frame.f_code
            owner = _owner(code.co_filename)
            if owner:
                break
            if phase is None and "site-packages/sphinx/" in code.co_filename:
                name = code.co_name
                phase = PHASES.get(f"{Path(code.co_filename).name}:{name}"
                                   if name == "__init__" else name)
            frame = frame.f_back
        key = owner or f"Sphinx: {phase or 'other'}"
        seconds[key] = seconds.get(key, 0.0) + now - last[0]
        last[0] = now

    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, interval, interval)
    try:
        status = build_main([*SPHINX[1:], out])
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    for key, spent in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {spent:6.2f} s  {key}")
    print(f"  {sum(seconds.values()):6.2f} s  in all (Python's start and exit not sampled)")
    sys.exit(status)


def builds():
    """Clean and no-op builds: CPU seconds, then where one more build's time went."""
    pages = len([p for p in (ROOT / "docs").rglob("*.md")
                 if not {"_build", "_data"} & set(p.relative_to(ROOT).parts)])
    sample = [sys.executable, __file__, "--sample-build"]
    with tempfile.TemporaryDirectory() as out:
        clean = min(cpu_seconds([*SPHINX, f"{out}/{i}"]) for i in range(3))
        noop = min(cpu_seconds([*SPHINX, f"{out}/0"]) for _ in range(3))
        print(f"clean html build ({pages} pages): {clean:.2f} s of CPU (user + sys); "
              f"one more, sampled:", flush=True)
        subprocess.run([*sample, f"{out}/sampled"], check=True, cwd=ROOT)
        print(f"no-op rebuild: {noop:.2f} s of CPU (user + sys); one more, sampled:", flush=True)
        subprocess.run([*sample, f"{out}/sampled"], check=True, cwd=ROOT)


def launches():
    sys.path.insert(0, str(ROOT))
    from harness.launch import run

    imports = seconds([sys.executable, "-c", "import torch"], repeat=3)
    print(f"python -c 'import torch': {imports:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello.py"
        hello.write_text(HELLO)
        for launcher in ("torchrun", "env"):
            best = min(run(hello, launcher=launcher, nproc=2).seconds for _ in range(3))
            print(f"2-rank hello world under {launcher}: {best:.2f} s")


def cpu_by_program(log: Path, top: int = 12) -> None:
    """The CPU seconds of the Python processes the tests started, summed by program (the
    script a process ran, or its -m module), most first."""
    totals: dict[str, list[float]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        entry = json.loads(line)
        argv = entry["argv"]
        name = Path(argv[0]).name if argv and argv[0] not in ("-c", "-m", "") else "python -c/-m"
        totals.setdefault(name, []).append(entry["cpu"])
    everything = sum(sum(v) for v in totals.values())
    print(f"CPU of the {sum(map(len, totals.values()))} Python processes the tests started: "
          f"{everything:.0f} s")
    for name, cpus in sorted(totals.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"  {sum(cpus):7.0f} s  {len(cpus):4d} processes  {name}")


def machine_cpu() -> tuple[float, float]:
    """Seconds of CPU this machine has been busy and idle since it started, all cores
    (/proc/stat): what every process used, Slurm's jobs and the browser included."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / hz, idle / hz


def suite():
    """`make test` with pytest's report of the 10 slowest tests."""
    log = Path(tempfile.mkstemp(prefix="bench-cpu-", suffix=".jsonl")[1])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before, idle_before = machine_cpu()
    start = time.monotonic()
    done = subprocess.run(["make", "--no-print-directory", "test",
                           "PYTEST_ARGS=--durations=10 -q"],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SNIPPET_HARNESS_CPU_LOG": str(log)})
    wall = time.monotonic() - start
    busy_after, idle_after = machine_cpu()
    measured = json.loads((ROOT / ".pytest_cache/v/snippets/file-seconds").read_text())
    (ROOT / "tests/file_seconds.json").write_text(json.dumps(measured, indent=0, sort_keys=True)
                                                  + "\n")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"CPU of make test and the processes it waited for: {cpu:.0f} s")
    busy, idle = busy_after - busy_before, idle_after - idle_before
    print(f"CPU of the whole machine meanwhile (Slurm's jobs included): {busy:.0f} s busy, "
          f"{idle:.0f} s idle: {100 * busy / (busy + idle):.0f} % of {os.cpu_count()} cores, "
          f"so at least {busy / os.cpu_count():.0f} s of wall time on them")
    cpu_by_program(log)
    out = done.stdout
    summary = out.strip().splitlines()[-1] if out.strip() else "(no output)"
    print(f"make test: {wall:.0f} s wall, exit code {done.returncode}: {summary}")
    if done.returncode:  # what failed, and where the whole report is
        report = Path(tempfile.mkstemp(prefix="bench-make-test-", suffix=".txt")[1])
        report.write_text(out + done.stderr)
        for line in re.findall(r"^(?:FAILED|ERROR) .*$", out, re.M):
            print(f"  {line}")
        print(f"  the whole report: {report}")
    slowest = re.search(r"=+ slowest 10 durations =+\n(.*?)\n(?:\n|=)", out, re.S)
    if slowest:
        print("10 slowest tests:")
        for line in slowest.group(1).splitlines():
            print(f"  {line}")
    return done.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the test suite")
    parser.add_argument("--sample-build", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample_build:
        sampled_build(args.sample_build)
    builds()
    launches()
    return 0 if args.quick else suite()


if __name__ == "__main__":
    sys.exit(main())
