"""Output that pages show, captured from real runs into files beside the snippets.

A test calls :func:`check_output` with a run's result. Normally this compares
the run's standard output with ``snippets/<chapter>/<name>.out`` (or
``<name>.<variant>.out``) after masking what legitimately changes from run to
run; with ``UPDATE_OUTPUTS=1`` in the environment (``make outputs``) it writes
the file instead. The pages literal-include these files, so what a reader sees
is what the last capture printed.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from harness.launch import Result, snippet

#: (pattern, replacement) pairs applied to both sides before comparing.
MASKS = [
    (re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)? ?(s|ms|sec|seconds|samples/s|it/s)\b"), "<time>"),
    (re.compile(r"\b(port|pid|PID)[ =:]+\d+"), r"\1 <n>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    # columns of figures are right-aligned: a masked figure may change the padding
    (re.compile(r" {2,}"), " "),
]


def mask(text: str, extra: list[tuple[str, str]] = ()) -> str:
    for pattern, repl in [*MASKS, *[(re.compile(p), r) for p, r in extra]]:
        text = pattern.sub(repl, text)
    return text


def output_path(script: Path, variant: str | None = None) -> Path:
    suffix = f".{variant}.out" if variant else ".out"
    return script.with_name(script.stem + suffix)


def check_output(result: Result, variant: str | None = None,
                 masks: list[tuple[str, str]] = ()) -> None:
    """Compare (or, with UPDATE_OUTPUTS=1, record) the run's stdout with its .out file.

    ``masks`` adds (regex, replacement) pairs for what else varies in this snippet.
    """
    check_text(result.stdout, result.script, variant, masks)


def check_text(actual: str, script: str | Path, variant: str | None = None,
               masks: list[tuple[str, str]] = ()) -> None:
    """As :func:`check_output`, for text other than a run's stdout (error lines, a diff, a
    table the test builds from a run) shown from ``<script stem>[.variant].out``.

    ``script`` is a path, or a name relative to ``snippets/``.
    """
    path = output_path(snippet(script), variant)
    if os.environ.get("UPDATE_OUTPUTS") == "1":
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing: run `make outputs` to capture it"
    expected = path.read_text()
    if mask(actual, masks) != mask(expected, masks):
        diff = "\n".join(difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), str(path), "this run", lineterm=""))
        raise AssertionError(f"the output shown on the page has drifted; "
                             f"run `make outputs` if the change is right\n{diff}")
