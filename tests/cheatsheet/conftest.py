"""A launcher for the shell snippets of docs/cheatsheet.md: ``bash script.sh``."""

import os

from harness.launch import BIN, Launch, Proc, launcher
from tests.slurm.real_cluster import _outside_the_job


@launcher("bash")
def _bash(l: Launch) -> list[Proc]:
    """``bash script.sh`` in a shell where the virtual environment is active."""
    return [Proc("bash", ["bash", str(l.script), *l.args],
                 {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})]


launcher("real-bash")(_outside_the_job("bash"))  # on the GPU cluster the tests run in
