"""Which releases of PyTorch each snippet's tests passed on: recorded by the test runs.

After a test session run with --record-releases (``make releases``; harness/releases.py),
every snippet whose test file ran whole (not a selection of its tests) gets an entry for the release of torch the session ran with: ``"passed"`` when
none of its tests failed and none was skipped other than for want of GPUs, ``"failed"``
when one failed. The entries live in one JSON file, docs/_data/torch_versions.json,
which no one edits by hand: ``make releases TORCH=2.X.Y`` adds the entries of another release,
and the site shows each snippet's range from it (docs/_ext/snippets.py).

A snippet's *claim* is the oldest release its tests passed on, from which on they passed
on every release tried up to the newest one they passed on.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from contextlib import contextmanager
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


def load(path: Path | None = None) -> dict[str, dict[str, str]]:
    path = path or data_file()
    return json.loads(path.read_text()) if path.is_file() else {}


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions on other releases
        yield


def record(results: dict[str, str], release: str, path: Path | None = None) -> None:
    """Add ``{snippet: "passed" or "failed"}`` for ``release`` to the data file."""
    path = path or data_file()
    with _locked(path):
        data = load(path)
        for snippet, outcome in results.items():
            data.setdefault(snippet, {})[release] = outcome
        ordered = {s: dict(sorted(r.items(), key=lambda kv: key(kv[0])))
                   for s, r in sorted(data.items())}
        path.write_text(json.dumps(ordered, indent=1) + "\n")


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


def claims(data: dict | None = None) -> dict[str, str]:
    """Each snippet's oldest release in its tested range."""
    data = load() if data is None else data
    return {s: r[0] for s, r in ((s, tested_range(rel)) for s, rel in data.items()) if r}


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


def oldest_claim(data: dict | None = None) -> str | None:
    """The oldest release any snippet claims."""
    return min(claims(data).values(), key=key, default=None)


if __name__ == "__main__":  # python3 -m harness.torch_versions oldest  (for .ci/run)
    import sys

    if sys.argv[1:] != ["oldest"]:
        sys.exit("usage: python3 -m harness.torch_versions oldest")
    print(oldest_claim() or "")
