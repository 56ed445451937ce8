"""snippets/memory/deepspeed_zero.py and its job script snippets/memory/deepspeed_zero.sbatch,
shown on docs/memory/deepspeed.md.

One run per world size trains with every config file; the ds_config_*.json
tests check each config's own claims on the same runs. The job script runs on the two
simulated nodes of the local Slurm cluster as the page shows it, one process per GPU of
the profile's nodes, and on a GPU cluster on the nodes and GPUs of the job the tests run
in (tests/slurm/clusters.py).
"""

import pytest

from harness.outputs import check_text
from tests.compare import without_deepspeed_logs
from tests.devices import on_each_device
from tests.memory.runs import (DS_CONFIGS, DS_TIMEOUT, GPU_ATOL, assert_same_weights,
                               deepspeed_gpu_run, deepspeed_run, deepspeed_tables,
                               needs_deepspeed, reference, saved)
from tests.on_gpus import NcclLogs
from tests.slurm.clusters import on_each_cluster
from tests.slurm.real_cluster import TIMEOUT

SNIPPET = "memory/deepspeed_zero.py"
pytestmark = needs_deepspeed


def assert_every_config_trains_like_one_process(result, ranks, atol=1e-5, configs=DS_CONFIGS):
    tables = deepspeed_tables(result.stdout)
    assert list(tables) == configs
    expected = reference(SNIPPET, clip=1.0)  # the configs clip gradients at norm 1.0
    for config in configs:
        assert len(tables[config]) == ranks
        assert_same_weights(saved(result, config.replace(".json", ".pt")), expected, atol)


def test_deepspeed_launcher_two_ranks():
    result = deepspeed_run(2)
    check_text(without_deepspeed_logs(result), SNIPPET, command=result.command)
    assert "'--local_rank=1'" in result.stdout  # the launcher logs the command it starts
    assert_every_config_trains_like_one_process(result, 2)


@pytest.mark.parametrize("ranks", [1, 4])
@on_each_device(gpus=2, one_gpu=True)
def test_torchrun(ranks, device):
    """On GPUs one process per GPU, over NCCL: ``ranks`` is the CPU's count."""
    if device.gpus and ranks == 4:
        pytest.skip("on GPUs the suite runs one process per GPU: the case of 1 rank")
    ranks = device.ranks(2) if device.gpus else ranks
    result = deepspeed_gpu_run(ranks) if device.cuda else deepspeed_run(ranks)
    if ranks == 4:
        check_text(without_deepspeed_logs(result), SNIPPET, variant="4ranks",
                   command=result.command)
    assert_every_config_trains_like_one_process(result, ranks, atol=device.pick(1e-5, GPU_ATOL))


@on_each_cluster()
def test_the_job_script_runs_zero3_on_two_nodes(cluster):
    """As the page shows it: one process per GPU of both nodes of the profile. On a GPU
    cluster, the one the tests run in (tests/slurm/clusters.py): one torchrun per node of
    that job (1 or 2), ZeRO-3 across all their GPUs."""
    world = cluster.nodes * cluster.gpus_per_node
    folder = cluster.folder("deepspeed_zero")
    logs = NcclLogs(folder / "nccl-logs")  # where every node sees it
    result = cluster.submit("memory/deepspeed_zero.sbatch", world_size=world,
                            timeout=cluster.pick(DS_TIMEOUT, TIMEOUT), workdir=folder,
                            files=("memory/deepspeed_zero.py", "memory/ds_config_zero3.json"),
                            sbatch_args=cluster.shape(tasks_per_gpu=False),
                            env=cluster.pick({}, logs.env))
    if cluster.real:
        logs.assert_nccl_ran(world)
    else:
        check_text(without_deepspeed_logs(result), SNIPPET, variant="slurm",
                   job="memory/deepspeed_zero.sbatch", command=result.command)
    assert_every_config_trains_like_one_process(result, world, atol=cluster.pick(1e-5, GPU_ATOL),
                                                configs=["ds_config_zero3.json"])
