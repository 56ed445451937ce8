"""Which releases of PyTorch each snippet's tests passed on, and for which content of it.

After a test session run with --record-releases (``make releases``; harness/releases.py),
every snippet whose test file ran whole (not a selection of its tests) gets a record for
the release of torch the session ran with: its outcome, ``"passed"`` when none of its
tests failed and none was skipped other than for want of GPUs, ``"failed"`` when one
failed, and the content it was made for (``content``). The records live in one JSON file,
docs/_data/torch_versions.json, one line each, which no one edits by hand: ``make releases
TORCH=2.X.Y PYTEST_ARGS=tests`` adds the records of another release.

Only the records made for a snippet's content as it is now count (``current``): the site
shows each snippet's range from them (docs/_ext/snippets.py), and the claims below come
from them. An edited snippet keeps its older records in the file, unshown, and shows only
the releases it passed since, until it is recorded again.

A snippet's content is a hash of its text and of the text of every file of its folder in
snippets/ whose name it contains, and so on for what those name: a job script starts
``train.py``, a script reads ``ds_config_zero2.json``, each by its name, from its own
folder, as the reader will. A name in a docstring counts too: one file too many only
costs a record. What is hashed:

- Python: the text without its comments and without the lines that hold nothing else
  (found by tokenize), so that a marker comment a page's excerpt starts at, or a reworded
  comment, keeps the records: comments neither run nor print (only a traceback's line
  numbers move, and they do not depend on the release). Docstrings count: a script may
  print them. Python 3.9 to 3.13 find the same comments, so give the same hash.
- A notebook: its code cells, as they are (they hold shell and IPython lines).
- Anything else, every byte: in a job script, ``#SBATCH`` lines and the centre profile's
  ``#>cluster`` markers are comments that count.

Captured outputs (``.out``) and tests are not part of it: a record says which releases the
code a reader copies ran on.

A snippet's *claim* is the oldest release its tests passed on, from which on they passed
on every release tried up to the newest one they passed on.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import subprocess
import tokenize
from contextlib import contextmanager
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
DATA = ROOT / "docs" / "_data" / "torch_versions.json"
#: Another file for the records (the tests of this module write to a temporary one).
DATA_ENV = "SNIPPET_HARNESS_TORCH_VERSIONS"


def data_file() -> Path:
    return Path(os.environ.get(DATA_ENV) or DATA)


def key(release: str) -> tuple[int, ...]:
    """Sort key of a release: "2.10.0" after "2.9.1"."""
    return tuple(int(part) for part in re.findall(r"\d+", release)[:3])


def torch_release() -> str:
    """The installed release of torch, without the build tag: "2.13.0" for "2.13.0+cpu"."""
    return version("torch").split("+")[0]


def load(path: Path | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """Every record: ``{snippet: {release: {"outcome": ..., "content": ...}}}``."""
    path = path or data_file()
    return json.loads(path.read_text()) if path.is_file() else {}


#: Tokens that are no code of their own (their place differs between Pythons).
_LAYOUT = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def _python(text: str) -> str:
    """Python text without its comments and the lines that hold nothing else."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    lines, kept = text.split("\n"), set()
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, column = token.start
            lines[row - 1] = lines[row - 1][:column]
        elif token.type not in _LAYOUT:  # code, a string: every row it spans
            kept.update(range(token.start[0], token.end[0] + 1))
    return "\n".join(lines[row - 1].rstrip() for row in sorted(kept))


def _hashed(file: Path) -> str:
    """The part of a file its content hash covers (the module's docstring says why)."""
    stat = file.stat()
    return _hashed_once(file, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=None)  # a build hashes train.py for each job script that starts it
def _hashed_once(file: Path, mtime_ns: int, size: int) -> str:
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".py":
        return _python(text)
    if file.suffix == ".ipynb":
        return "\n\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"]
                            if cell["cell_type"] == "code")
    return text


def dependencies(snippet: str, root: Path = SNIPPETS) -> list[str]:
    """The files of the snippet's folder it names, those they name, and so on."""
    file = root / snippet
    names = sorted(p.name for p in file.parent.iterdir()
                   if p.is_file() and p.suffix != ".out" and not p.name.startswith("."))
    found, todo = {file.name}, [file.name]
    while todo:
        text = _hashed(file.parent / todo.pop())
        for name in names:
            if name not in found and name in text and re.search(
                    rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text):
                found.add(name)
                todo.append(name)
    folder = Path(snippet).parent
    return sorted((folder / name).as_posix() for name in found - {file.name})


def content(snippet: str, root: Path = SNIPPETS) -> str:
    """The hash of the snippet and what it names, as ``root`` holds them now."""
    digest = hashlib.sha256()
    for name in [snippet, *dependencies(snippet, root)]:
        digest.update(f"{name}\0{_hashed(root / name)}\0".encode())
    return digest.hexdigest()[:12]


def matching(records: dict[str, dict[str, str]], now: str) -> dict[str, str]:
    """``{release: outcome}`` of the records made for content ``now``."""
    return {release: r["outcome"] for release, r in records.items() if r["content"] == now}


def current(data: dict | None = None, root: Path = SNIPPETS) -> dict[str, dict[str, str]]:
    """``{snippet: {release: outcome}}`` of the records made for each snippet as it is."""
    data = load() if data is None else data
    found = {snippet: matching(records, content(snippet, root))
             for snippet, records in data.items() if (root / snippet).is_file()}
    return {snippet: releases for snippet, releases in found.items() if releases}


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions on other releases
        yield


def _dumps(data: dict) -> str:
    """The records as JSON, one line each, oldest release first: a diff shows records."""
    def block(snippet, records):
        lines = [f"  {json.dumps(release)}: {json.dumps(records[release])}"
                 for release in sorted(records, key=key)]
        return f" {json.dumps(snippet)}: {{\n" + ",\n".join(lines) + "\n }"
    return "{\n" + ",\n".join(block(s, data[s]) for s in sorted(data)) + "\n}\n"


def record(results: dict[str, str], release: str, path: Path | None = None,
           contents: dict[str, str] | None = None) -> None:
    """Record ``{snippet: "passed" or "failed"}`` for ``release``, each for the content
    ``contents`` gives (its hash when the tests started), else for its content now."""
    path = path or data_file()
    with _locked(path):
        data = load(path)
        for snippet, outcome in results.items():
            made_for = (contents or {}).get(snippet) or content(snippet)
            data.setdefault(snippet, {})[release] = {"outcome": outcome, "content": made_for}
        text = _dumps(data)
        if not path.is_file() or path.read_text() != text:  # else a no-op build re-reads
            path.write_text(text)                            # every page that shows one


def tested_range(releases: dict[str, str]) -> tuple[str, str] | None:
    """(oldest, newest) release of the unbroken run of passes that ends with the newest
    pass: a failure on an older release ends the range there."""
    ordered = sorted(releases, key=key)
    passed = [r for r in ordered if releases[r] == "passed"]
    if not passed:
        return None
    newest = passed[-1]
    oldest = newest
    for release in reversed(ordered[:ordered.index(newest)]):
        if releases[release] != "passed":
            break
        oldest = release
    return oldest, newest


def claims(releases: dict | None = None) -> dict[str, str]:
    """Each snippet's oldest release in its tested range, from ``current()`` records."""
    releases = current() if releases is None else releases
    return {s: r[0] for s, r in ((s, tested_range(rel)) for s, rel in releases.items()) if r}


def snippets_of(test_file: str) -> list[str]:
    """The snippets (paths relative to snippets/) a test file tests by its mirrored name:
    tests/<chapter>/test_<name>.py ↔ snippets/<chapter>/<name>.<any suffix but .out>."""
    parts = Path(test_file).parts
    if len(parts) != 3 or parts[0] != "tests" or not parts[2].startswith("test_"):
        return []
    folder = SNIPPETS / parts[1]
    stem = parts[2][len("test_"):-len(".py")]
    return sorted(f"{parts[1]}/{p.name}" for p in folder.glob(f"{stem}.*")
                  if p.suffix != ".out" and p.stem == stem) if folder.is_dir() else []


def older_python(needs: str) -> tuple[str, str] | None:
    """(python, release) of an interpreter whose torch is older than ``needs``: this
    one's, else the .venv-torch-<release> of the oldest release any snippet claims (which
    ``make venv TORCH=<release>`` creates), else any older .venv-torch-*, or None."""
    import sys

    if key(torch_release()) < key(needs):
        return sys.executable, torch_release()
    oldest = oldest_claim()
    others = sorted((p.name[len(".venv-torch-"):] for p in ROOT.glob(".venv-torch-*")), key=key)
    for release in ([oldest] if oldest else []) + others:  # else any older one made here
        python = ROOT / f".venv-torch-{release}" / "bin" / "python"
        if key(release) < key(needs) and python.is_file():
            return str(python), release
    return None


def run_on_older(script: str, needs: str, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Start a snippet with a torch older than it needs and return what happened."""
    import pytest

    found = older_python(needs)
    if found is None:
        oldest = oldest_claim() or "<release>"
        pytest.skip(f"no PyTorch older than {needs} here: `make venv TORCH={oldest}` makes one")
    python, release = found
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    result = subprocess.run([python, str(SNIPPETS / script), *args], capture_output=True,
                            text=True, timeout=120, env=env, cwd=ROOT)
    result.release = release
    return result


def oldest_claim(releases: dict | None = None) -> str | None:
    """The oldest release any snippet claims for its content now."""
    return min(claims(releases).values(), key=key, default=None)


if __name__ == "__main__":  # python3 -m harness.torch_versions oldest  (for .ci/run)
    import sys

    if sys.argv[1:] != ["oldest"]:
        sys.exit("usage: python3 -m harness.torch_versions oldest")
    print(oldest_claim() or "")
