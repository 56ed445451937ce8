"""Helpers for the tests of docs/troubleshooting: several runs at once, and the error
lines a failing run printed, captured like output so that the pages can show them."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from harness.launch import Result, run
from harness.outputs import GLOO_ERROR, check_text
from tests.devices import Device

def run_together(**launches: dict) -> dict[str, Result]:
    """Start several launches at once (the failing ones mostly wait on a timeout).

    Each value holds the keyword arguments of :func:`harness.launch.run`, with the
    snippet under "script" and its command-line arguments under "args".
    """
    def start(kwargs):
        kwargs = dict(kwargs)
        return run(kwargs.pop("script"), *kwargs.pop("args", ()), **kwargs)

    with ThreadPoolExecutor(max_workers=len(launches)) as pool:
        futures = {name: pool.submit(start, kwargs) for name, kwargs in launches.items()}
        return {name: future.result() for name, future in futures.items()}


def bug_and_fix(script: str, device: Device) -> dict[str, Result]:
    """The snippet run twice at once with torchrun on 2 processes: as shown, with a short
    collective timeout (``bug``), and with ``--fix`` (``fix``). On GPUs the timeout is
    longer, as NCCL starts slower, and both runs' processes ran NCCL (its logs show it).
    At world size 1 (the one-GPU case) only ``fix`` runs: with no other rank to wait
    for, the bug cannot hang."""
    ranks = device.ranks(2)
    common = dict(script=script, launcher="torchrun", nproc=ranks,
                  timeout=device.pick(90, 240), check=False)
    launches = {}
    if ranks > 1:
        launches["bug"] = dict(common, args=["--timeout", str(device.pick(5, 20))],
                               env=device.env("bug"))
    launches["fix"] = dict(common, args=["--fix"], env=device.env("fix"))
    runs = run_together(**launches)
    for name, result in runs.items():
        device.assert_ran(ranks, name, result)
    return runs


def check_failed_by_itself(result: Result) -> None:
    """The run failed, and was not killed by the harness: the collective timeout ended it."""
    assert not result.timed_out and result.returncode != 0, result.report()


def check_hang(result: Result, device: Device) -> None:
    """The run failed by itself (not killed by the harness); with gloo, with gloo's error
    on every rank that reported, and those lines match <snippet>.hang.out. (NCCL pairs
    collectives out of step without any check, so its message has no fixed wording.)"""
    check_failed_by_itself(result)
    if device.backend == "gloo":
        check_gloo_hang(result)


def check_gloo_hang(result: Result) -> None:
    """The run failed by itself (not killed by the harness) with gloo's error on every
    rank that reported, and those lines match <snippet>.hang.out."""
    check_failed_by_itself(result)
    lines = error_lines(result)
    assert lines and all(re.search(GLOO_ERROR, line) for line in lines), result.report()
    check_errors(result, "hang", lines)


def error_lines(result: Result, pattern: str = r"^\[rank\d+\]: \w*(Error|Exception)\b") -> list[str]:
    """The lines of every process's output that match pattern, sorted (ranks race)."""
    return sorted({line for line in result.text.splitlines() if re.search(pattern, line)})


def check_errors(result: Result, variant: str, lines: list[str]) -> None:
    """Compare (or record) these lines with <snippet>.<variant>.out, as check_output does."""
    assert lines, result.report()
    check_text("\n".join(lines) + "\n", result.script, variant, command=result.command,
               port=result.port)
