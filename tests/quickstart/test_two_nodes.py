"""snippets/quickstart/two_nodes.sbatch, shown on docs/quickstart.md.

Submitted as it is to the two simulated nodes, from a folder that holds train.py and a
link to the tests' virtual environment as .venv: one torchrun per node, one process per
GPU of the profile's nodes (4 for the default), meet at the rendezvous and train as one
job (of 8 for the default). On a GPU cluster, the same test on
the nodes and GPUs of the job the tests run in (tests/slurm/clusters.py).
"""

import dataclasses

from harness.outputs import check_output
from harness.slurm import CONTAINER_LOG
from tests.quickstart.runs import assert_trained, submit_quickstart
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import PROFILE, job_nodes


@on_each_cluster()
def test_two_torchruns_train_as_one_job_of_every_gpu_of_both_nodes(cluster):
    world_size = cluster.nodes * cluster.gpus_per_node
    job = submit_quickstart(cluster, "quickstart/two_nodes.sbatch", world_size,
                            sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(job)
    assert_trained(job, world_size, cluster.backend)
    if not cluster.real:
        assert job_nodes(job) == ["node1", "node2"]


#: A container for a profile that has none: the tests' stand-in runs what it is given.
CONTAINER = {"container_image": "/images/pytorch.sif",
             "container_exec": "apptainer exec --bind /scratch"}


@on_each_cluster()
def test_in_a_container_each_node_starts_its_torchrun_through_the_container_command(cluster):
    """The profile's container (or, for a profile without one, an example): the job
    script runs each node's torchrun through the container command, which a stand-in
    notes before it runs it (harness/slurm.py), with the cores of every GPU of the node
    and a thread per core for each of its processes; the job trains as before."""
    profile = PROFILE if PROFILE.container_exec else dataclasses.replace(PROFILE, **CONTAINER)
    world_size = cluster.nodes * cluster.gpus_per_node
    job = submit_quickstart(cluster, "quickstart/two_nodes.sbatch", world_size,
                            sbatch_args=cluster.shape(tasks_per_gpu=False), profile=profile)
    assert_trained(job, world_size, cluster.backend)
    ran = sorted((line.split(" ", 4) for line in
                  (job.workdir / CONTAINER_LOG).read_text().splitlines()),
                 key=lambda noted: int(noted[1]))  # node, task, cores, threads, command
    nodes = [node for node, *_ in ran]
    assert [task for _, task, *_ in ran] == [str(n) for n in range(cluster.nodes)], ran
    assert len(set(nodes)) == cluster.nodes and nodes == job_nodes(job)  # one per node
    per_gpu = cluster.cpus_per_gpu
    assert all((cores, threads) == (str(cluster.gpus_per_node * per_gpu), str(per_gpu))
               for _, _, cores, threads, _ in ran), ran
    assert all(command.startswith(f"{profile.container_exec} IMAGE torchrun --nnodes=")
               for *_, command in ran), ran
