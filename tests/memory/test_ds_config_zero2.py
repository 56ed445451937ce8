"""snippets/memory/ds_config_zero2.json, shown on docs/memory/deepspeed.md."""

import pytest

from tests.memory.runs import assert_ds_config_holds, deepspeed_gpu_run, needs_deepspeed

#: Bytes per parameter each rank holds, with N ranks.
BYTES = dict(params=lambda n: 4, grads=lambda n: 4 / n, optimiser=lambda n: 12 / n)
CONFIG = "memory/ds_config_zero2.json"


@needs_deepspeed
def test_stage_2_shards_gradients_too():
    assert_ds_config_holds(CONFIG.split("/")[1], **BYTES)


@needs_deepspeed
@pytest.mark.multigpu(2)
def test_on_two_gpus_too():
    assert_ds_config_holds(CONFIG.split("/")[1], **BYTES, runs={2: deepspeed_gpu_run()})
