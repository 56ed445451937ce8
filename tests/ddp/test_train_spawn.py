"""snippets/ddp/train_spawn.py, shown on docs/ddp/launching.md."""

from harness.launch import run
from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.ddp.train_runs import final_parameters, losses, train, two_ranks
from tests.devices import on_each_device

SNIPPET = "ddp/train_spawn.py"


@on_each_device(gpus=2, one_gpu=True)
def test_spawned_processes_train_exactly_like_train_py_under_torchrun(device):
    """On GPUs spawn starts one process per GPU, and trains like train.py under torchrun
    within GPU_ATOL (train_runs.two_ranks runs on the GPUs there too; on one GPU, train.py
    on one process)."""
    ranks = device.ranks(2)
    result = run(SNIPPET, "--nprocs", str(ranks), "--batch-size", str(32 // ranks),
                 world_size=ranks)
    device.check_output(result)
    assert result.stdout.startswith(
        f"world size {ranks} ({device.backend}, {device.type}), started by mp.spawn: 32 ")
    torchrun = two_ranks() if ranks == 2 else train(launcher="torchrun", world=ranks)
    if not device.cuda:
        assert losses(result.stdout) == losses(torchrun.stdout)
    saved = load(result.workdir / "checkpoint.pt")
    assert saved["step"] == 96
    assert_same_state(saved["model"], final_parameters(torchrun), device.pick(0, GPU_ATOL))
