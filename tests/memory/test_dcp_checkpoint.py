"""snippets/memory/dcp_checkpoint.py, shown on docs/memory/checkpoints.md."""

import re

import pytest
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from harness.launch import run
from tests.compare import load
from tests.devices import on_each_device
from tests.memory.runs import GPU_ATOL, assert_same_weights, dcp_runs, reference, torchrun

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


@on_each_device(gpus=2)
def test_four_ranks_resume_the_two_rank_checkpoint_like_an_uninterrupted_run(device, tmp_path):
    """On GPUs one process per GPU, over NCCL, both for the 2 epochs and for the resumed run:
    2 GPUs load what 2 GPUs saved."""
    saving, ranks = device.ranks(2), device.ranks(4)
    if device.cuda:
        first = run(SNIPPET, "--epochs", "2", launcher="torchrun", nproc=saving,
                    workdir=tmp_path / "run", env=device.env("first"))
        resumed = run(SNIPPET, "--epochs", "4", launcher="torchrun", nproc=ranks,
                      workdir=tmp_path / "run", env=device.env("resumed"))
        device.assert_ran(saving, "first", first)  # on GPUs: NCCL ran in every process
        device.assert_ran(ranks, "resumed", resumed)
    else:
        resumed = dcp_runs().resumed  # in the folder of the 2-rank run
    device.check_output(resumed, variant="4ranks")
    assert (f"resumed from checkpoints/epoch_2 after epoch 2: saved by {saving} ranks, "
            f"loaded by {ranks}") in resumed.stdout
    assert "epoch 3:" in resumed.stdout and "epoch 1:" not in resumed.stdout
    folder = resumed.workdir / "checkpoints/epoch_4"
    assert len([f for f in files(folder) if f.endswith(".distcp")]) == ranks
    app = checkpoint(folder, tmp_path)
    assert (app["epoch"], app["world_size"]) == (4, ranks)
    assert_same_weights(app["model"], reference(SNIPPET, epochs=4),
                        atol=device.pick(1e-5, GPU_ATOL))
    if not device.cuda:  # the page shows the CPU's figures
        # the page: epoch 3's loss is that of the 3-epoch FSDP2 run on its own page
        fsdp2_loss = re.search(r"last-epoch loss (\S+)",
                               torchrun("memory/fsdp2.py", 2).stdout)[1]
        assert f"epoch 3: loss {fsdp2_loss}," in resumed.stdout
