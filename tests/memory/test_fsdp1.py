"""snippets/memory/fsdp1.py, shown on docs/memory/fsdp2.md (migrating from FSDP1)."""

import pytest

from tests.devices import on_each_device
from tests.memory.runs import (GPU_ATOL, assert_same_weights, held_table, reference, saved,
                               torchrun, torchrun_on)

SNIPPET = "memory/fsdp1.py"


@on_each_device(gpus=2)
def test_fsdp1_flattens_shards_and_trains_like_fsdp2_and_one_process(device):
    result = torchrun_on(device, SNIPPET, 2)
    device.check_output(result)
    assert "world size 2; the model is now a FullyShardedDataParallel" in result.stdout
    assert "blocks.0._fsdp_wrapped_module._flat_param: Parameter (16608,)" in result.stdout
    rows = held_table(result.stdout)[""]
    assert [p for p, _, _ in rows] == pytest.approx([132_929 * 4 / 2] * 2, rel=0.02)
    assert_same_weights(saved(result, "fsdp1.pt"), reference(SNIPPET),
                        atol=device.pick(1e-5, GPU_ATOL))
    if not device.gpus:
        # the same weights, name for name, as the FSDP2 run: migrating changes no maths
        assert_same_weights(saved(result, "fsdp1.pt"),
                            saved(torchrun("memory/fsdp2.py", 2), "fsdp2.pt"))
