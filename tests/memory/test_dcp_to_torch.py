"""snippets/memory/dcp_to_torch.py, shown on docs/memory/checkpoints.md."""

import re
import runpy

import pytest
import torch

from harness.launch import run, snippet
from tests.compare import load
from tests.devices import on_each_device
from tests.memory.runs import GPU_ATOL, assert_same_weights, dcp_runs, reference

SNIPPET = "memory/dcp_to_torch.py"


@on_each_device(gpus=2, one_gpu=True)
def test_converts_a_checkpoint_into_one_file_for_plain_pytorch(device, tmp_path):
    """On the CPU the 4-rank checkpoint that resumed a 2-rank one; on GPUs, one that FSDP2
    saved from one GPU per process (on one GPU, from cuda:0 at world size 1), converted in
    one process as on the page: the file loads on the CPU, as it was saved."""
    if device.gpus:
        ranks = device.ranks(4)
        saving = run("memory/dcp_checkpoint.py", "--epochs", "4", launcher="torchrun",
                     nproc=ranks, workdir=tmp_path, env=device.env())
        device.assert_ran(ranks, result=saving)  # on GPUs: NCCL ran in every process
        converted = run(SNIPPET, "checkpoints/epoch_4", "model.pt", workdir=tmp_path)
    else:
        ranks, converted = 4, dcp_runs().converted
    device.check_output(converted)
    assert (f"model.pt: epoch 4, saved by {ranks} ranks, 26 model tensors, "
            "optimiser state for 26") in converted.stdout
    state = load(converted.workdir / "model.pt", map_location=None)["app"]  # as it was saved
    assert all(t.device.type == "cpu" for t in state["model"].values())
    trained = reference("memory/dcp_checkpoint.py", epochs=4)
    assert_same_weights(state["model"], trained, atol=device.pick(1e-5, GPU_ATOL))
    # the predictions printed are those of the trained weights (on GPUs, of those saved)
    model = runpy.run_path(str(snippet(SNIPPET)))["Net"]()
    model.load_state_dict(device.pick(trained, state["model"]))
    x = torch.linspace(-1, 1, 3 * 64).reshape(3, 64)
    with torch.no_grad():
        expected = model(x).flatten().tolist()
    printed = re.search(r"predictions for three inputs: \[(.*)\]", converted.stdout)[1]
    assert [float(v) for v in printed.split(",")] == pytest.approx(expected, abs=1e-4)
