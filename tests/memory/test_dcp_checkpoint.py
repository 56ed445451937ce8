"""snippets/memory/dcp_checkpoint.py, shown on docs/memory/checkpoints.md."""

import re

import pytest
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from harness.launch import run
from harness.outputs import check_output
from tests.compare import load
from tests.devices import on_each_device
from tests.memory.runs import GPU_ATOL, assert_same_weights, dcp_runs, reference, torchrun
from tests.on_gpus import NcclLogs

SNIPPET = "memory/dcp_checkpoint.py"


def files(folder):
    return sorted(p.name for p in folder.iterdir())


def checkpoint(folder, tmp_path):
    """What a DCP checkpoint folder holds, read here in one process."""
    dcp_to_torch_save(folder, tmp_path / "check.pt")
    return load(tmp_path / "check.pt")["app"]


@on_each_device(gpus=1)
def test_every_rank_writes_a_file_of_one_checkpoint_per_epoch(device, tmp_path):
    """2 ranks on the CPU (the run the next test resumes); on one GPU, at world size 1,
    FSDP2 on cuda:0 writes its shards from the GPU."""
    ranks = device.ranks(2)
    if device.gpus:
        first = run(SNIPPET, "--epochs", "2", launcher="torchrun", nproc=ranks,
                    workdir=tmp_path / "run", env=device.env())
        device.assert_ran(ranks, result=first)  # on GPUs: NCCL ran in every process
    else:
        first = dcp_runs().first
    device.check_output(first, variant="2ranks")
    assert f"starting from scratch on {ranks} ranks" in first.stdout
    folder = first.workdir / "checkpoints/epoch_2"
    assert files(folder) == [".metadata"] + [f"__{r}_0.distcp" for r in range(ranks)]
    app = checkpoint(folder, tmp_path)
    assert (app["epoch"], app["world_size"]) == (2, ranks)
    assert_same_weights(app["model"], reference(SNIPPET, epochs=2),
                        atol=device.pick(1e-5, GPU_ATOL))


def test_four_ranks_resume_the_two_rank_checkpoint_like_an_uninterrupted_run(tmp_path):
    runs = dcp_runs()
    check_output(runs.resumed, variant="4ranks")
    assert "resumed from checkpoints/epoch_2 after epoch 2: saved by 2 ranks, loaded by 4" \
        in runs.resumed.stdout
    assert "epoch 3:" in runs.resumed.stdout and "epoch 1:" not in runs.resumed.stdout
    folder = runs.folder / "checkpoints/epoch_4"
    assert len([f for f in files(folder) if f.endswith(".distcp")]) == 4
    app = checkpoint(folder, tmp_path)
    assert (app["epoch"], app["world_size"]) == (4, 4)
    assert_same_weights(app["model"], reference(SNIPPET, epochs=4))
    # the page: epoch 3's loss is that of the 3-epoch FSDP2 run on its own page
    fsdp2_loss = re.search(r"last-epoch loss (\S+)", torchrun("memory/fsdp2.py", 2).stdout)[1]
    assert f"epoch 3: loss {fsdp2_loss}," in runs.resumed.stdout


@pytest.mark.multigpu(2)
def test_on_two_gpus_resume(tmp_path):
    first, resumed = NcclLogs(), NcclLogs()
    run(SNIPPET, "--epochs", "2", launcher="torchrun", nproc=2, workdir=tmp_path,
        env=first.env)
    result = run(SNIPPET, "--epochs", "4", launcher="torchrun", nproc=2, workdir=tmp_path,
                 env=resumed.env)
    first.assert_nccl_ran(2)
    resumed.assert_nccl_ran(2)
    assert "saved by 2 ranks, loaded by 2" in result.stdout
    app = checkpoint(tmp_path / "checkpoints/epoch_4", tmp_path)
    assert_same_weights(app["model"], reference(SNIPPET, epochs=4), atol=GPU_ATOL)
