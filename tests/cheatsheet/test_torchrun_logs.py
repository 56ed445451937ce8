"""snippets/cheatsheet/torchrun_logs.sh, shown on docs/cheatsheet.md.

Run with bash (the launcher of harness/launch.py) as the page shows, next to ranks.py: torchrun writes every local rank's
stdout and stderr to files of its own under logs/, and prints only local rank 0's lines
in the terminal, each prefixed with its rank.
"""

import re

from harness.launch import run
from tests.cheatsheet.log_files import assert_log_files
from tests.devices import on_each_device

SNIPPET = "cheatsheet/torchrun_logs.sh"


def assert_each_rank_has_its_own_logs(result) -> None:
    terminal_out, terminal_err = result.outputs[0].stdout, result.outputs[0].stderr
    assert re.findall(r"^\[default(\d)\]:rank \d", terminal_out, re.M) == ["0"]
    assert "[default0]:rank 0: a warning" in terminal_err
    assert "rank 1: a warning" not in terminal_err.replace("[default0]", "")
    assert_log_files(result.workdir, 2)
    assert terminal_out.endswith("rank 1 of 2 (local rank 1): training\n")  # the cat


@on_each_device(gpus=2)
def test_one_log_file_per_rank_and_only_rank_0_in_the_terminal(device):
    result = run(SNIPPET, launcher="bash", files=("cheatsheet/ranks.py",), world_size=2,
                 env=device.env())
    device.check_output(result)
    assert_each_rank_has_its_own_logs(result)
    device.assert_ran(2, result=result)  # ranks.py's barrier, over NCCL
