"""snippets/model_parallel/pipeline_manual.py, shown on docs/model_parallel/pipeline.md."""

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.model_parallel.reference import assert_run_matches, trained_in_one_process
from tests.on_gpus import NcclLogs

SNIPPET = "model_parallel/pipeline_manual.py"


def test_two_stages_give_the_loss_and_gradients_of_one_process(tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path)
    check_output(result)
    assert "stage 0 on rank 0 holds: 0.weight, 0.bias, 2.weight, 2.bias" in result.stdout
    assert "stage 1 on rank 1 holds: 4.weight, 4.bias, 6.weight, 6.bias" in result.stdout
    assert_run_matches(result, trained_in_one_process(SNIPPET))


@pytest.mark.multigpu(2)
def test_on_two_gpus(tmp_path):
    logs = NcclLogs()
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, env=logs.env)
    logs.assert_nccl_ran(2)
    assert_run_matches(result, trained_in_one_process(SNIPPET))
