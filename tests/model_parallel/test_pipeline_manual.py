"""snippets/model_parallel/pipeline_manual.py, shown on docs/model_parallel/pipeline.md."""

from harness.launch import run
from tests.devices import on_each_device
from tests.model_parallel.reference import assert_run_matches, trained_in_one_process

SNIPPET = "model_parallel/pipeline_manual.py"


@on_each_device(gpus=2)
def test_two_stages_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, env=device.env())
    device.assert_ran(2, result=result)
    device.check_output(result)
    assert "stage 0 on rank 0 holds: 0.weight, 0.bias, 2.weight, 2.bias" in result.stdout
    assert "stage 1 on rank 1 holds: 4.weight, 4.bias, 6.weight, 6.bias" in result.stdout
    assert_run_matches(result, trained_in_one_process(SNIPPET))
