"""snippets/memory/dcp_checkpoint.py, shown on docs/memory/checkpoints.md."""

import re

import pytest
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from harness.launch import run
from harness.outputs import check_output
from tests.compare import load
from tests.memory.runs import GPU_ATOL, assert_same_weights, dcp_runs, reference, torchrun
from tests.on_gpus import NcclLogs

SNIPPET = "memory/dcp_checkpoint.py"


def files(folder):
    return sorted(p.name for p in folder.iterdir())


def checkpoint(folder, tmp_path):
    """What a DCP checkpoint folder holds, read here in one process."""
    dcp_to_torch_save(folder, tmp_path / "check.pt")
    return load(tmp_path / "check.pt")["app"]


def test_two_ranks_write_one_checkpoint_per_epoch_with_a_file_per_rank(tmp_path):
    runs = dcp_runs()
    check_output(runs.first, variant="2ranks")
    assert "starting from scratch on 2 ranks" in runs.first.stdout
    folder = runs.folder / "checkpoints/epoch_2"
    assert files(folder) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    app = checkpoint(folder, tmp_path)
    assert (app["epoch"], app["world_size"]) == (2, 2)
    assert_same_weights(app["model"], reference(SNIPPET, epochs=2))


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
