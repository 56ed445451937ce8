"""snippets/recipes/own_script.sbatch, shown on docs/recipes/own_script.md.

Submitted as it is to the two simulated nodes, from a folder that holds train_ddp.py and
a link to the tests' virtual environment as .venv: one torchrun per node, one process per
GPU of the profile's nodes (4 for the default), train as one job (of 8 for the default)
and end with the model, optimiser, scheduler and random generators of the same script
started by one torchrun with as many processes. On a GPU cluster, the same test on the
nodes and GPUs of the job the tests run in (tests/slurm/clusters.py).
"""

import re

from harness.launch import BIN, run
from harness.outputs import check_output
from tests.compare import assert_same_state
from tests.recipes.runs import (DDP, TRAINING, VAL_IMAGES, checkpoint, folder_with_data,
                                 validations)
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end, job_nodes

EPOCHS = 3
TRAIN_IMAGES = 960


@on_each_cluster()
def test_two_torchruns_train_train_ddp_py_on_every_gpu_of_both_nodes(cluster):
    world = cluster.nodes * cluster.gpus_per_node
    folder = cluster.folder("own-script")
    (folder / ".venv").symlink_to(BIN.parent)
    job = cluster.submit("recipes/own_script.sbatch", files=(DDP,), world_size=world,
                         activate=False, workdir=folder,
                         sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(job, tolerance=TRAINING)
        assert job_nodes(job) == ["node1", "node2"]
    assert job_end(job)["state"] == "COMPLETED"
    steps = -(-TRAIN_IMAGES // world) // 32  # per epoch: a rank's share, in batches of 32
    assert re.search(rf"^{world} processes \({cluster.backend}\): {world} × 32 = {world * 32} "
                     rf"images per step, learning rate {0.1 * world:g}, {steps} steps "
                     r"per epoch$", job.stdout, re.M), job.stdout
    assert [count for *_, count in validations(job.stdout)] == [VAL_IMAGES] * EPOCHS
    assert job.stdout.count("saved checkpoint.pt") == 1  # rank 0 alone prints
    state = checkpoint(job)
    assert state["step"] == EPOCHS * steps and len(state["rng"]) == world

    if not cluster.real:  # one torchrun with as many processes, and threads, on one node
        reference = run(DDP, "--data", "images", "--epochs", str(EPOCHS),
                        launcher="torchrun", nproc=world, timeout=300,
                        workdir=folder_with_data("own-script-reference-"),
                        env={"OMP_NUM_THREADS": str(cluster.cpus_per_gpu)})
        assert_same_state(state, checkpoint(reference))
