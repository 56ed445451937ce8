"""snippets/memory/fsdp2.py, shown on docs/memory/fsdp2.md."""

import pytest

from harness.outputs import BF16, check_output
from tests.devices import on_each_device
from tests.memory.runs import (FSDP2_RUNS as RUNS, GPU_ATOL, PARAMETERS, assert_same_weights,
                               held_table, reference, saved, torchrun, torchrun_on)

SNIPPET = "memory/fsdp2.py"


def sharding_line(ranks, where="cpu"):
    rows = 256 // ranks
    return (f"blocks[0].ff[0].weight is a DTensor (256, 64) with placements (Shard(dim=0),); "
            f"rank 0 stores ({rows}, 64) on {where}")


@pytest.mark.parametrize("ranks", [2, 4])
@on_each_device(gpus=2, one_gpu=True)
def test_each_rank_holds_one_nth_and_training_matches_one_process(device, ranks):
    """On GPUs one process per GPU, over NCCL: ``ranks`` picks the CPU's run, the plain one
    (2) or ``--offload`` (4), whose shards stay on the CPU while the maths runs on the GPUs.
    On one GPU the plain run at world size 1: one rank holds the whole model, on cuda."""
    if device.gpus == 1 and ranks != 2:
        pytest.skip(f"on one GPU the suite runs the plain command at world size {device.ranks(2)}")
    options = RUNS[ranks]  # the CPU's run for that many ranks, with its options on GPUs too
    ranks = device.ranks(ranks)
    result = torchrun_on(device, SNIPPET, ranks, *options)  # on GPUs: NCCL ran in each
    device.check_output(result, variant="offload" if "--offload" in options else None)
    # the shards on the device, or on the CPU when offloaded
    where = "cpu" if "--offload" in options else device.type
    assert sharding_line(ranks, where) in result.stdout
    rows = held_table(result.stdout)[""]
    assert len(rows) == ranks
    for params, grads, state in rows:
        assert params == pytest.approx(4 * PARAMETERS / ranks, rel=0.02)
        assert grads == pytest.approx(params, rel=1e-3)
        assert state == pytest.approx(2 * params, rel=0.01)  # Adam: two moments per element
    assert_same_weights(saved(result, "fsdp2.pt"), reference(SNIPPET),
                        atol=device.pick(1e-5, GPU_ATOL))


def test_bf16_compute_keeps_fp32_shards():
    """MixedPrecisionPolicy casts a gathered copy: the shards and Adam stay fp32."""
    result = torchrun(SNIPPET, 1, *RUNS[1])
    check_output(result, variant="bf16", tolerance=BF16)
    (params, grads, state), = held_table(result.stdout)[""]
    assert params == pytest.approx(4 * PARAMETERS, rel=1e-3)  # 4 bytes per parameter
    assert state == pytest.approx(2 * params, rel=1e-3)
    assert_same_weights(saved(result, "fsdp2.pt"), reference(SNIPPET), atol=2e-2)
