"""Where the time goes: site build times, the cost of one launch, and the test suite.

    make bench                 # all of it (the suite takes minutes)
    make bench ARGS=--quick    # without the test suite

Prints one line per measurement, in seconds of wall time (best of a few runs for the
builds and launches; the suite runs once, as `make test` runs it, and its 10 slowest
tests follow). The seconds each test file took go to tests/file_seconds.json: a clone
that has not run the tests yet starts the slowest files first by them.
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
sys.path.insert(0, str(ROOT))

from harness.launch import run  # noqa: E402

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


def builds():
    sphinx = [str(Path(sys.executable).parent / "sphinx-build"), "-W", "-n", "-q", "-b", "html",
              "docs"]
    with tempfile.TemporaryDirectory() as out:
        clean = min(seconds([*sphinx, f"{out}/{i}"]) for i in range(3))
        noop = seconds([*sphinx, f"{out}/0"], repeat=3)
    pages = len([p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts])
    print(f"clean html build ({pages} pages): {clean:.2f} s")
    print(f"no-op rebuild: {noop:.2f} s")


def launches():
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
                          env={**os.environ, "PYTHONUNBUFFERED": "1",
                               "SNIPPET_HARNESS_CPU_LOG": str(log)})
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
    args = parser.parse_args()
    builds()
    launches()
    return 0 if args.quick else suite()


if __name__ == "__main__":
    sys.exit(main())
