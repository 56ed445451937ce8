"""Repeat the crash-then-resume run of docs/ddp/elastic.md and count how often it works.

    .venv/bin/python tools/elastic_loop.py            # 20 runs on one node
    .venv/bin/python tools/elastic_loop.py -n 5 --nodes 2

Each run is the test's own scenario (tests/ddp/test_elastic.py): torchrun with
--max-restarts=1 and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, the last rank crashing
once at step 25. A run counts as a success when it finishes, rank 0 reports the
resume from step 20, and the final parameters and optimiser state equal, bit for
bit, those of one uninterrupted run. Prints one line per run, then successes/N
and the wall times. A benchmark, not a per-commit test: 20 runs take minutes.
"""

import argparse
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

scenario = runpy.run_path(str(ROOT / "tests" / "ddp" / "test_elastic.py"))


def succeeded(result, reference):
    if not result.ok or scenario["RESUMED"] not in result.text:
        return False
    try:
        scenario["assert_same_training"](result, reference)
    except (AssertionError, FileNotFoundError):
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="number of runs (default 20)")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                        help="2 ranks on one node, or one rank on each of two nodes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="elastic-loop-") as tmp:
        reference = scenario["elastic"](nnodes=args.nodes, workdir=Path(tmp, "reference"))
        times, ok = [], 0
        for i in range(args.n):
            start = time.monotonic()
            result = scenario["crash_and_resume"](nnodes=args.nodes, check=False,
                                                  workdir=Path(tmp, f"run{i}"))
            times.append(time.monotonic() - start)
            good = succeeded(result, reference)
            ok += good
            state = "ok" if good else ("TIMED OUT" if result.timed_out else "FAILED")
            print(f"run {i + 1:>2}/{args.n}: {state:<9} {times[-1]:5.1f} s", flush=True)
            if not good:
                print(result.report(), file=sys.stderr)
    print(f"successes: {ok}/{args.n}")
    print(f"wall time per run: min {min(times):.1f} s, median {statistics.median(times):.1f} s, "
          f"max {max(times):.1f} s; uninterrupted reference {reference.seconds:.1f} s")


if __name__ == "__main__":
    main()
