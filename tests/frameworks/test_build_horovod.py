"""snippets/frameworks/build_horovod.sh, shown on docs/frameworks/horovod.md.

`make test-extras` builds and installs Horovod with this very script before the tests
run (its rule names it), so every Horovod test relies on it. These tests check what the
build gave, and that a second run installs the kept wheel without compiling.
"""

import os
import subprocess
import sys
import time

import pytest

from harness.launch import ROOT, snippet
from tests.frameworks.common import needs_horovod

SNIPPET = "frameworks/build_horovod.sh"

pytestmark = [pytest.mark.extras, needs_horovod]


def test_make_test_extras_builds_horovod_with_this_script():
    rule = (ROOT / "Makefile").read_text().split("$(EXTRAS_STAMP):")[1].split("\n\n")[0]
    assert f"bash snippets/{SNIPPET}" in rule
    subprocess.run(["bash", "-n", str(snippet(SNIPPET))], check=True)


def test_horovod_was_built_for_this_torch_with_gloo():
    probe = subprocess.run([sys.executable, "-c", (
        "import horovod, horovod.torch as hvd, torch; "
        "print(horovod.__version__, hvd.gloo_built(), torch.__version__)")],
        capture_output=True, text=True, check=True)
    version, gloo, torch_version = probe.stdout.split()
    assert (version, gloo) == ("0.28.1", "True")  # and its extension loaded beside this torch
    assert torch_version.startswith("2.13.")


def test_a_second_run_installs_the_kept_wheel_without_compiling():
    started = time.monotonic()
    rerun = subprocess.run(["bash", str(snippet(SNIPPET))], capture_output=True, text=True,
                           env={**os.environ, "PYTHON": sys.executable}, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Building wheel" not in rerun.stdout and "horovod-0.28.1.tar.gz" not in rerun.stdout
    assert "horovod==0.28.1" in rerun.stdout or "horovod-0.28.1" in rerun.stdout
    assert time.monotonic() - started < 120
