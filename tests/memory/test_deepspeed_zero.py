"""snippets/memory/deepspeed_zero.py, shown on docs/memory/deepspeed.md.

One run per world size trains with every config file; the ds_config_*.json
tests check each config's own claims on the same runs.
"""

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.memory.runs import (DS_CONFIGS, DS_TIMEOUT, GPU_ATOL, assert_same_weights, deepspeed_run,
                               deepspeed_tables, needs_deepspeed, reference, saved,
                               with_ds_configs, without_deepspeed_logs)

SNIPPET = "memory/deepspeed_zero.py"
pytestmark = needs_deepspeed


def assert_every_config_trains_like_one_process(result, ranks, atol=1e-5):
    tables = deepspeed_tables(result.stdout)
    assert list(tables) == DS_CONFIGS
    expected = reference(SNIPPET, clip=1.0)  # the configs clip gradients at norm 1.0
    for config in DS_CONFIGS:
        assert len(tables[config]) == ranks
        assert_same_weights(saved(result, config.replace(".json", ".pt")), expected, atol)


def test_deepspeed_launcher_two_ranks():
    result = deepspeed_run(2)
    check_output(without_deepspeed_logs(result))
    assert "'--local_rank=1'" in result.stdout  # the launcher logs the command it starts
    assert_every_config_trains_like_one_process(result, 2)


@pytest.mark.parametrize("ranks", [1, 4])
def test_torchrun(ranks):
    result = deepspeed_run(ranks)
    if ranks == 4:
        check_output(without_deepspeed_logs(result), variant="4ranks")
    assert_every_config_trains_like_one_process(result, ranks)


@pytest.mark.multigpu(2)
def test_on_two_gpus(tmp_path):
    result = run(SNIPPET, *DS_CONFIGS, launcher="torchrun", nproc=2,
                 workdir=with_ds_configs(tmp_path), timeout=DS_TIMEOUT)
    assert_every_config_trains_like_one_process(result, 2, atol=GPU_ATOL)
