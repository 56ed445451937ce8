"""snippets/memory/fsdp1.py, shown on docs/memory/fsdp2.md (migrating from FSDP1)."""

import pytest

from tests.devices import on_each_device
from tests.memory.runs import (GPU_ATOL, assert_same_weights, held_table, reference, saved,
                               torchrun, torchrun_on)

SNIPPET = "memory/fsdp1.py"
BLOCK = 33_216  # parameters of one block: its flat parameter, before sharding


@on_each_device(gpus=2, one_gpu=True)
def test_fsdp1_flattens_shards_and_trains_like_fsdp2_and_one_process(device):
    """At world size 1 FSDP1 keeps each block whole (NO_SHARD): one flat parameter each."""
    ranks = device.ranks(2)
    result = torchrun_on(device, SNIPPET, ranks)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    assert f"world size {ranks}; the model is now a FullyShardedDataParallel" in result.stdout
    flat = f"blocks.0._fsdp_wrapped_module._flat_param: Parameter ({BLOCK // ranks},)"
    assert flat in result.stdout
    rows = held_table(result.stdout)[""]
    assert [p for p, _, _ in rows] == pytest.approx([132_929 * 4 / ranks] * ranks, rel=0.02)
    assert_same_weights(saved(result, "fsdp1.pt"), reference(SNIPPET),
                        atol=device.pick(1e-5, GPU_ATOL))
    if not device.cuda:
        # the same weights, name for name, as the FSDP2 run: migrating changes no maths
        assert_same_weights(saved(result, "fsdp1.pt"),
                            saved(torchrun("memory/fsdp2.py", ranks), "fsdp2.pt"))
