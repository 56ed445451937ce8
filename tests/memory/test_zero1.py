"""snippets/memory/zero1.py, shown on docs/memory/zero1.md."""

import pytest
import torch

from harness.launch import snippet_code
from tests.devices import on_each_device
from tests.memory.runs import (GPU_ATOL, assert_same_weights, held_table, reference, saved,
                               torchrun_on)

SNIPPET = "memory/zero1.py"
LABELS = "Adam|ZeroRedundancyOptimizer"


@pytest.mark.parametrize("ranks", [2, 4])
@on_each_device(gpus=2, one_gpu=True)
def test_zero1_shards_adam_state_and_trains_like_one_process(device, ranks):
    """On one GPU: DDP on cuda:0 and ZeRO-1 over NCCL at world size 1, where the one rank
    keeps the whole of Adam's state."""
    if device.gpus and ranks != 2:
        pytest.skip(f"on GPUs the suite runs world size {device.ranks(2)}")
    ranks = device.ranks(ranks)
    result = torchrun_on(device, SNIPPET, ranks)  # on GPUs: NCCL ran in every process
    device.check_output(result, variant=None if ranks == 2 else f"{ranks}ranks")
    tables = held_table(result.stdout, LABELS)
    adam, zero = tables["Adam"], tables["ZeroRedundancyOptimizer"]
    assert len(adam) == len(zero) == ranks
    for (p_adam, g_adam, s_adam), (p_zero, g_zero, s_zero) in zip(adam, zero):
        assert (p_zero, g_zero) == (p_adam, g_adam)  # ZeRO-1 leaves weights and gradients whole
        if ranks > 1:  # one rank keeps the whole state
            assert s_zero <= (0.52 if ranks == 2 else 0.27) * s_adam
    assert sum(s for _, _, s in zero) == pytest.approx(adam[0][2], rel=1e-3)  # shards add up
    assert f"saved zero1.pt with the optimiser state of all {ranks} ranks" in result.stdout

    state = saved(result, "zero1.pt")
    assert_same_weights(state["model"], reference(SNIPPET), atol=device.pick(1e-5, GPU_ATOL))
    # consolidate_state_dict(to=0) gathered the state of every parameter, not only rank 0's,
    # in the format of a plain Adam, which loads it
    moments = state["optimizer"]["state"]
    assert len(moments) == len(state["model"])
    assert all(set(s) == {"step", "exp_avg", "exp_avg_sq"} for s in moments.values())
    model = snippet_code(SNIPPET)["Net"]()
    model.load_state_dict(state["model"])
    torch.optim.Adam(model.parameters()).load_state_dict(state["optimizer"])
