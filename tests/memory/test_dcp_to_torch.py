"""snippets/memory/dcp_to_torch.py, shown on docs/memory/checkpoints.md."""

import re
import runpy

import pytest
import torch

from harness.launch import run, snippet
from harness.outputs import check_output
from tests.compare import load
from tests.memory.runs import GPU_ATOL, assert_same_weights, dcp_runs, reference
from tests.on_gpus import NcclLogs

SNIPPET = "memory/dcp_to_torch.py"


def test_converts_a_four_rank_checkpoint_into_one_file_for_plain_pytorch():
    runs = dcp_runs()
    check_output(runs.converted)
    assert "model.pt: epoch 4, saved by 4 ranks, 26 model tensors, optimiser state for 26" \
        in runs.converted.stdout
    state = load(runs.folder / "model.pt")["app"]
    assert_same_weights(state["model"], reference("memory/dcp_checkpoint.py", epochs=4))
    # the predictions printed are those of the reference weights
    model = runpy.run_path(str(snippet(SNIPPET)))["Net"]()
    model.load_state_dict(reference("memory/dcp_checkpoint.py", epochs=4))
    x = torch.linspace(-1, 1, 3 * 64).reshape(3, 64)
    with torch.no_grad():
        expected = model(x).flatten().tolist()
    printed = re.search(r"predictions for three inputs: \[(.*)\]", runs.converted.stdout)[1]
    assert [float(v) for v in printed.split(",")] == pytest.approx(expected, abs=1e-4)


@pytest.mark.multigpu(2)
def test_converts_a_checkpoint_saved_by_two_gpus(tmp_path):
    logs = NcclLogs()
    run("memory/dcp_checkpoint.py", "--epochs", "4", launcher="torchrun", nproc=2, workdir=tmp_path,
        env=logs.env)
    logs.assert_nccl_ran(2)  # the checkpoint was saved by two GPUs
    converted = run(SNIPPET, "checkpoints/epoch_4", "model.pt", workdir=tmp_path)
    assert "model.pt: epoch 4, saved by 2 ranks, 26 model tensors" in converted.stdout
    state = load(tmp_path / "model.pt", map_location=None)["app"]  # loads on the CPU as saved
    assert_same_weights(state["model"], reference("memory/dcp_checkpoint.py", epochs=4),
                        atol=GPU_ATOL)
