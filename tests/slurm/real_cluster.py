"""The job scripts on a real Slurm cluster with GPUs, for their multigpu tests.

`sbatch snippets/slurm/gpu_tests.sbatch` runs the multigpu tests inside a Slurm job on a
GPU node. There, the test of a job script submits it to the same cluster, as its local
case submits it to the local cluster of tools/local-slurm (tests/slurm/clusters.py:
``@on_each_cluster``), waits for it, and asserts what it asserts there. The job asks
for the partition, account and QOS of the job the tests run in; for 2 nodes when that
job has 2 or more, otherwise 1; and for the GPUs per node that job has, with its cores
shared out among them. Outside such a job, the test is skipped with the reason.

The jobs run in folders under .gpu-test-jobs/ in the guide's top folder, which the
compute nodes see (``/tmp`` is each node's own), and which git ignores. The jobs get the
environment of the tests without the variables of the job the tests run in: a job
inherits the environment it is submitted from, and srun (Slurm 23.11 and later) refuses
to start when an inherited SLURM_CPUS_PER_TASK disagrees with the job's own.

None of this uses the local cluster: the GPU cluster's cases are not marked ``slurm``.
The launchers that submit from outside the job (``real-sbatch``, ``real-srun``,
``real-bash``) are harness/slurm.py's.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

from harness import slurm
from harness.launch import ROOT, Result, run, shared
from harness.outputs import GPU_ATOL  # noqa: F401 (the job scripts' tests import it from here)

JOBS_DIR = ROOT / ".gpu-test-jobs"
#: Seconds a job may take, its time in the queue included (GPU_TEST_JOB_TIMEOUT).
TIMEOUT = float(os.environ.get("GPU_TEST_JOB_TIMEOUT", "3600"))


def gpu_cluster_marks(gpus: int = 2, jobs: int = 1) -> list[pytest.MarkDecorator]:
    """The marks of a test that submits ``jobs`` jobs, one after the other, to the GPU
    cluster: multigpu(gpus), and a time limit that allows for their time in the queue."""
    return [pytest.mark.multigpu(gpus), pytest.mark.timeout(jobs * TIMEOUT + 600)]


def on_the_gpu_cluster(gpus: int = 2, jobs: int = 1):
    """Mark a test that runs on the GPU cluster alone with :func:`gpu_cluster_marks`
    (a test that runs on the local cluster too: tests/slurm/clusters.py)."""

    def mark(test):
        for each in gpu_cluster_marks(gpus, jobs):
            test = each(test)
        return test

    return mark


@dataclasses.dataclass(frozen=True)
class RealCluster:
    """What the jobs the tests submit ask for. It answers what tests/slurm/clusters.py's
    LocalCluster answers, for a test that runs on both (``@on_each_cluster``)."""

    nodes: int  # 2 when the job the tests run in has 2 nodes or more, otherwise 1
    gpus_per_node: int  # the GPUs per node of the job the tests run in
    cpus_per_gpu: int  # its cores on the node, shared out among its GPUs
    options: tuple[str, ...]  # its --partition, --account and --qos

    real = True  # not a field: the cluster of GPUs, not the local one
    #: What train.py's first line says it trained with (tests.slurm.jobs.backend).
    backend = "nccl on cuda"

    def pick(self, local, real):
        """The value for this cluster: ``real``."""
        return real

    def launcher(self, name: str) -> str:
        """The harness's launcher that types ``name`` (sbatch, srun, bash) on a login node
        of this cluster, from outside the job the tests run in."""
        return f"real-{name}"

    def folder(self, name: str) -> Path:
        """A new folder for a job, which every node sees (:func:`job_folder`)."""
        return job_folder(name)

    def submit(self, script: str, *args: str, **options) -> Result:
        """``sbatch script`` on this cluster (:func:`submit_real`)."""
        return submit_real(self, script, *args, **options)

    def shape(self, tasks_per_gpu: bool = True, nodes: int | None = None,
              gpus_per_node: int | None = None) -> list[str]:
        """sbatch options for a job of ``nodes`` nodes and ``gpus_per_node`` GPUs each:
        one task per GPU, or (``tasks_per_gpu=False``) one task per node with all the cores."""
        nodes = nodes or self.nodes
        gpus = gpus_per_node or self.gpus_per_node
        tasks, cpus = (gpus, self.cpus_per_gpu) if tasks_per_gpu else (1, gpus * self.cpus_per_gpu)
        return [f"--nodes={nodes}", f"--gpus-per-node={gpus}", f"--ntasks-per-node={tasks}",
                f"--cpus-per-task={cpus}"]

    def use(self, monkeypatch) -> None:
        """Make the test's own Slurm commands (squeue, scontrol) ask this cluster."""
        if slurm.OUTER_SLURM_CONF:
            monkeypatch.setenv("SLURM_CONF", slurm.OUTER_SLURM_CONF)
        else:
            monkeypatch.delenv("SLURM_CONF", raising=False)


def _is_local_test_cluster(conf: str | None) -> bool:
    """True for the configuration of tools/local-slurm, whose GPUs are /dev/null."""
    return bool(conf) and Path(conf).with_name("dev").joinpath("gpu0").resolve() == Path(
        "/dev/null")


def real_cluster(gpus: int = 2) -> RealCluster:
    """The cluster the tests run in, or skip the test with the reason there is none."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        pytest.skip("not inside a Slurm job: submit snippets/slurm/gpu_tests.sbatch to run "
                    "the job scripts on a cluster")
    if _is_local_test_cluster(slurm.OUTER_SLURM_CONF):
        pytest.skip("inside a job of the local test cluster, whose GPUs are not real")
    have = int(env.get("SLURM_GPUS_ON_NODE", "0"))
    if have < gpus:
        pytest.skip(f"needs a job with {gpus} GPUs per node, this job has {have}")
    cpus = int(env.get("SLURM_CPUS_ON_NODE", "1"))
    options = tuple(f"--{option}={env[name]}" for option, name in (
        ("partition", "SLURM_JOB_PARTITION"), ("account", "SLURM_JOB_ACCOUNT"),
        ("qos", "SLURM_JOB_QOS")) if env.get(name))
    nodes = 2 if int(env.get("SLURM_JOB_NUM_NODES", "1")) >= 2 else 1
    return RealCluster(nodes, have, max(1, cpus // have), options)


def login_environment() -> dict[str, str]:
    """The tests' environment without the variables of the job they run in, with the
    configuration of its cluster: a login node's, for a test's own srun or scancel."""
    env = {var: value for var, value in os.environ.items()
           if not var.startswith(slurm.JOB_VARIABLES)}
    if slurm.OUTER_SLURM_CONF:
        env["SLURM_CONF"] = slurm.OUTER_SLURM_CONF
    return env


def job_folder(name: str) -> Path:
    """A new folder of .gpu-test-jobs/ for a job, seen by every node of the cluster."""
    JOBS_DIR.mkdir(exist_ok=True)
    (JOBS_DIR / ".gitignore").write_text("*\n")
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=JOBS_DIR))


def submit_real(cluster: RealCluster, script: str, *args: str,
                files: tuple[str, ...] = ("slurm/train.py",), sbatch_args=(),
                workdir: Path | None = None, **options) -> Result:
    """``sbatch script`` on the real cluster, from a folder of .gpu-test-jobs/ holding
    ``files``; like :func:`tests.slurm.jobs.submit`. ``sbatch_args`` come after the
    cluster's options: ``cluster.shape(...)`` for the nodes, GPUs and tasks."""
    if workdir is None:
        workdir = job_folder(Path(script).stem)
    options.setdefault("world_size", 0)
    options.setdefault("timeout", TIMEOUT)
    return run(script, *args, launcher="real-sbatch", files=files, workdir=workdir,
               sbatch_args=[*cluster.options, *sbatch_args], **options)


@shared
def real_one_node(cluster: RealCluster, ranks: int) -> Result:
    """snippets/slurm/one_node.sbatch on ``ranks`` GPUs of one node, run once: the training
    the other jobs of docs/slurm are compared with on the real cluster."""
    return submit_real(cluster, "slurm/one_node.sbatch", world_size=ranks,
                       sbatch_args=cluster.shape(nodes=1, gpus_per_node=ranks))
