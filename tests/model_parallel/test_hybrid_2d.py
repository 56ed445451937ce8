"""snippets/model_parallel/hybrid_2d.py, shown on docs/model_parallel/hybrid.md."""

from harness.launch import run
from tests.devices import on_each_device
from tests.model_parallel.reference import assert_run_matches, trained_in_one_process

SNIPPET = "model_parallel/hybrid_2d.py"


def mesh_table(stdout):
    return [tuple(line.split()) for line in stdout.splitlines() if line[:4].strip().isdigit()]


@on_each_device(gpus=4)
def test_four_ranks_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=4, workdir=tmp_path, env=device.env())
    device.assert_ran(4, result=result)
    device.check_output(result)
    # Rows of the mesh split the data, columns split the matrices: a 16 x 16 wq is cut
    # into 4 x 16 pieces, by 2 for tensor parallelism, then by 2 for FSDP.
    assert mesh_table(result.stdout) == [
        ("0", "0", "0", "0-3", "4", "x", "16"), ("1", "0", "1", "0-3", "4", "x", "16"),
        ("2", "1", "0", "4-7", "4", "x", "16"), ("3", "1", "1", "4-7", "4", "x", "16")]
    assert_run_matches(result, trained_in_one_process(SNIPPET, "Net"))
