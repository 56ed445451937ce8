"""snippets/memory/ds_config_zero3.json, shown on docs/memory/deepspeed.md."""

from tests.memory.runs import assert_ds_config_holds, needs_deepspeed

CONFIG = "memory/ds_config_zero3.json"


@needs_deepspeed
def test_stage_3_shards_the_weights_too():
    assert_ds_config_holds(CONFIG.split("/")[1], params=lambda n: 4 / n, grads=lambda n: 4 / n,
                           optimiser=lambda n: 12 / n)
