"""snippets/slurm/train.py, which every training job of docs/slurm runs.

The jobs themselves are the tests of the job scripts; here, the promise of
docs/slurm/preemption.md that a process killed while it writes a checkpoint leaves
the previous checkpoint whole.
"""

from pathlib import Path

import pytest
import torch

from harness.launch import run, snippet

HELPER = Path(__file__).with_name("kill_during_save.py")


def test_a_kill_while_saving_leaves_the_previous_checkpoint_intact(tmp_path):
    result = run(HELPER, str(snippet("slurm/train.py")), world_size=1, workdir=tmp_path,
                 check=False)
    assert result.returncode == -9, result.report()  # SIGKILL
    assert result.stdout == "saved step 1\nwrote half of checkpoint.pt.tmp, killed\n"
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 1
    with pytest.raises(Exception):  # what saving in place would have left behind
        torch.load(tmp_path / "checkpoint.pt.tmp", weights_only=True)
