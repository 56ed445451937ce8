"""snippets/ddp/train_spawn.py, shown on docs/ddp/launching.md."""

from harness.launch import run
from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.ddp.train_runs import final_parameters, losses, two_ranks
from tests.devices import on_each_device

SNIPPET = "ddp/train_spawn.py"


@on_each_device(gpus=2)
def test_spawned_processes_train_exactly_like_train_py_under_torchrun(device):
    """On GPUs spawn starts one process per GPU, and trains like train.py under torchrun
    within GPU_ATOL (train_runs.two_ranks runs on the GPUs there too)."""
    result = run(SNIPPET, "--nprocs", "2", "--batch-size", "16", world_size=2)
    device.check_output(result)
    assert result.stdout.startswith(
        f"world size 2 ({device.backend}, {device.type}), started by mp.spawn: 32 ")
    if not device.gpus:
        assert losses(result.stdout) == losses(two_ranks().stdout)
    saved = load(result.workdir / "checkpoint.pt")
    assert saved["step"] == 96
    assert_same_state(saved["model"], final_parameters(two_ranks()), device.pick(0, GPU_ATOL))
