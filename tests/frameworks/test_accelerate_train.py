"""snippets/frameworks/accelerate_train.py and its job script
snippets/frameworks/accelerate_train.sbatch, shown on docs/frameworks/accelerate.md."""


import numpy as np
import pytest

from harness.launch import run, shared, snippet
from harness.outputs import check_output
from tests.compare import (assert_every_rank_holds_the_same, assert_same_state, load, rank_stdout,
                           run_every_rank_saves, saved, without_deepspeed_noise)
from tests.devices import on_each_device
from tests.frameworks.common import needs_accelerate
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, job_end
from tests.slurm.real_cluster import GPU_ATOL

SNIPPET = "frameworks/accelerate_train.py"
RANKS = 2
MULTI = ["--multi_gpu", "--num_processes", str(RANKS)]  # what the page tells readers to run

pytestmark = [pytest.mark.extras, needs_accelerate]


@shared
def accelerate_launch():
    return accelerate(SNIPPET, nproc=2, flags=MULTI)


def accelerate(script, **kwargs):
    return without_deepspeed_noise(run_every_rank_saves(script, launcher="accelerate", **kwargs))


@on_each_device(gpus=RANKS, one_gpu=True)
def test_accelerate_launch_starts_two_processes_that_end_identical(device):
    """On GPUs one process per GPU, over NCCL. On one GPU ``accelerate launch
    --num_processes 1`` (Accelerate refuses ``--multi_gpu`` with one process): one process
    that trains on cuda:0 without a process group (distributed type NO) on all the data."""
    ranks = device.ranks(RANKS)
    if device.gpus:
        multi = ["--multi_gpu"] if ranks > 1 else []
        result = accelerate(SNIPPET, nproc=ranks, timeout=240, env=device.env(),
                            flags=[*multi, "--num_processes", str(ranks)])
    else:
        result = accelerate_launch()
    device.check_output(result)
    mode = ("MULTI_GPU" if device.cuda else "MULTI_CPU") if ranks > 1 else "NO"
    assert result.stdout.startswith(f"processes: {ranks}, {mode} on {device.type}\n"), (
        result.report())
    assert result.ranks_started == set(range(ranks))  # the ranks joined one process group
    if ranks > 1:  # alone, the process starts no process group: NCCL has nothing to do
        device.assert_ran(ranks, result=result)  # Accelerate's group for MULTI_GPU: NCCL
    assert f"final parameters identical on all {ranks} processes" in result.stdout
    assert_every_rank_holds_the_same(result, ranks)
    # 1024 samples, 16 per step and process: 32 steps each, so each process read half the
    # data (alone, all of it: 64 steps)
    assert result.stdout.count(f"({64 // ranks} steps per process)") == 3


def test_torchrun_runs_the_same_script_to_the_same_parameters():
    result = run_every_rank_saves(SNIPPET, launcher="torchrun", nproc=2)
    assert result.stdout.startswith("processes: 2, MULTI_CPU on cpu\n")
    assert_every_rank_holds_the_same(result, 2)
    for a, b in zip(saved(result, 0), saved(accelerate_launch(), 0)):
        np.testing.assert_array_equal(a, b)


def test_cpu_flag_with_two_processes_starts_only_one():
    result = accelerate(SNIPPET, nproc=1, flags=["--cpu", "--num_processes", "2"])
    check_output(result, "cpu-flag")
    assert result.stdout.startswith("processes: 1, NO on cpu\n")
    assert result.stdout.count("(64 steps per process)") == 3  # all the data in one process


@pytest.mark.parametrize("launcher", ["accelerate", "torchrun"])
def test_without_cpu_true_processes_on_a_machine_without_gpus_train_alone(tmp_path, launcher):
    """What the snippet's comment on Accelerator(cpu=...) warns about, shown by removing it."""
    source = snippet(SNIPPET).read_text()
    assert "Accelerator(cpu=not torch.cuda.is_available())" in source
    alone = tmp_path / "accelerate_train.py"
    alone.write_text(source.replace("Accelerator(cpu=not torch.cuda.is_available())", "Accelerator()"))
    result = run_every_rank_saves(alone, launcher=launcher, nproc=2, flags=MULTI)
    for rank in (0, 1):  # both processes print, each its own lines: each is "main"
        printed = rank_stdout(result, rank)
        assert printed.startswith("processes: 1, NO on cpu\n")
        assert printed.count("(64 steps per process)") == 3  # each read all the data


@on_each_cluster()
def test_the_job_script_trains_on_two_nodes_as_many_processes_on_one(cluster):
    """One process per GPU of two nodes. On a GPU cluster, the one the tests run in
    (tests/slurm/clusters.py): one `accelerate launch` per node of its job, together on
    as many GPUs as this node has, and the model of torchrun on as many of this node's GPUs."""
    per_node = cluster.pick(GPUS, cluster.gpus_per_node // cluster.nodes)
    world = cluster.nodes * per_node
    job = cluster.submit("frameworks/accelerate_train.sbatch", files=(SNIPPET,),
                         world_size=world,
                         sbatch_args=cluster.shape(tasks_per_gpu=False, gpus_per_node=per_node))
    if not cluster.real:
        check_output(without_deepspeed_noise(job), "slurm")
    mode = cluster.pick("MULTI_CPU on cpu", "MULTI_GPU on cuda")
    assert job.stdout.startswith(f"processes: {world}, {mode}\n")  # once, not per node
    assert job.stdout.count("saved model.pt") == 1
    assert job_end(job)["state"] == "COMPLETED"
    one_node = run(SNIPPET, launcher="torchrun", nproc=world)
    assert_same_state(load(job.workdir / "model.pt"), load(one_node.workdir / "model.pt"),
                      atol=cluster.pick(0, GPU_ATOL))
