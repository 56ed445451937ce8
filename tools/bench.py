"""Measure the speed targets: site build times and the cost of a 2-rank launch.

    make bench            # build times and launch costs
    make bench ARGS=--tests   # also the wall time of the whole test suite

Prints one line per measurement, in seconds of wall time (best of a few runs,
except the test suite, which runs once).
"""

import argparse
import shutil
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also time the whole test suite")
    args = parser.parse_args()
    sphinx = [str(Path(sys.executable).parent / "sphinx-build"), "-W", "-n", "-q", "-b", "html", "docs"]
    with tempfile.TemporaryDirectory() as out:
        clean = min(seconds([*sphinx, f"{out}/{i}"]) for i in range(3))
        noop = seconds([*sphinx, f"{out}/0"], repeat=3)
    pages = len([p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts])
    print(f"clean html build ({pages} pages): {clean:.2f} s  (target 8 s)")
    print(f"no-op rebuild: {noop:.2f} s  (target 1.5 s)")

    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello.py"
        hello.write_text(HELLO)
        for launcher in ("torchrun", "env"):
            best = min(run(hello, launcher=launcher, nproc=2).seconds for _ in range(3))
            print(f"2-rank hello world under {launcher}: {best:.2f} s")
        test = ROOT / "tests" / "basics" / "test_ranks.py::test_two_nodes_of_two_processes"
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
        print(f"one 2-node x 2-process snippet test (with pytest start-up): {seconds(pytest, repeat=2):.2f} s")
    if args.tests:
        print(f"make test: {seconds(['make', 'test']):.1f} s  (target 360 s)")


if __name__ == "__main__":
    main()
