"""One test for every cluster: a job script's claim is written once and checked on the
local Slurm cluster (tools/local-slurm, where CI runs it) and on a real cluster with GPUs
(tests/slurm/real_cluster.py: the one the tests run in, inside the job of
snippets/slurm/gpu_tests.sbatch).

A test decorated with ``@on_each_cluster(gpus=N, jobs=J)`` runs once per cluster, with a
``cluster`` argument: ``local`` (marked ``slurm``: the local cluster, started for it, or
the test is skipped with the reason there is none) and ``gpu-cluster`` (marked as
real_cluster.gpu_cluster_marks mark it: ``multigpu(N)``, and a time limit for J jobs
and their time in the queue). The GPU cluster is :func:`real_cluster`'s, asked for when
the test starts, so that outside a job with N GPUs per node its case is skipped with
that function's reason. What differs between the runs is asked of ``cluster``, never
written twice:

* ``cluster.real``: whether it is the GPU cluster. What one run alone can check stays
  under ``if not cluster.real:`` (the captured output the page shows: the pages show the
  local runs; the local nodes' names, node1 and node2) or ``if cluster.real:`` (NCCL ran);
* ``cluster.nodes``, ``cluster.gpus_per_node``, ``cluster.cpus_per_gpu``: the shape of its
  jobs (local: 2 nodes of the centre profile, tests.slurm.jobs.GPUS GPUs each; GPU
  cluster: 1 or 2 nodes with the GPUs of the job the tests run in);
* ``cluster.shape(...)``: the sbatch options for a job of that shape (RealCluster.shape);
  none on the local cluster, shaped like the page's: its job scripts run as they are;
* ``cluster.submit(script, *args, files=..., sbatch_args=..., **options)``: sbatch the
  script and wait for the job (tests.slurm.jobs.submit, or real_cluster.submit_real with
  the cluster's partition, account and QOS); ``cluster.folder(name)``: a new folder for a
  job's files (on the GPU cluster one that every node sees);
* ``cluster.launcher(name)``: the launcher that types ``sbatch``, ``srun`` or ``bash`` on
  a login node (``real-srun``...: from outside the job the tests run in), and
  ``cluster.options``, its partition, account and QOS, for an srun of the test's own;
  ``cluster.use(monkeypatch)``: the test's own squeue, scontrol and scancel ask it;
* ``cluster.backend``: what train.py's first line says it trained with,
  ``gloo on cpu`` or ``nccl on cuda`` (tests.slurm.jobs.backend);
* ``cluster.pick(local, real)``: a value per cluster (a tolerance, a time limit, the
  options that make a GPU partition take a job that asks for no GPU).
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from pathlib import Path

import pytest

from harness.launch import Result
from tests.slurm.jobs import CPUS_PER_GPU, GPUS, submit
from tests.slurm.real_cluster import gpu_cluster_marks, real_cluster


@dataclasses.dataclass(frozen=True)
class LocalCluster:
    """The two simulated nodes of tools/local-slurm, shaped like the centre profile's
    partition. It answers what real_cluster.RealCluster answers for the GPU cluster."""

    real = False
    backend = "gloo on cpu"
    nodes = 2
    gpus_per_node = GPUS
    cpus_per_gpu = CPUS_PER_GPU
    options = ()  # the job scripts name the partition and account themselves

    def pick(self, local, real):
        """The value for this cluster: ``local``."""
        return local

    def launcher(self, name: str) -> str:
        """The harness's launcher ``name`` (sbatch, srun, bash): it types that on a login
        node of the local cluster."""
        return name

    def folder(self, name: str) -> Path:
        """A new folder for a job (the simulated nodes share this machine's files)."""
        return Path(tempfile.mkdtemp(prefix=f"{name}-"))

    def shape(self, tasks_per_gpu: bool = True, nodes: int | None = None,
              gpus_per_node: int | None = None) -> list[str]:
        """No option: the job script asks for the page's shape itself."""
        return []

    def use(self, monkeypatch) -> None:
        """Nothing to do: SLURM_CONF names the local cluster for every test marked slurm."""

    def submit(self, script: str, *args: str, **options) -> Result:
        """``sbatch script`` on the local cluster (tests.slurm.jobs.submit)."""
        return submit(script, *args, **options)


LOCAL = LocalCluster()


@dataclasses.dataclass(frozen=True)
class _OnTheGpuCluster:
    """The gpu-cluster case, until the test starts: a job with ``gpus`` GPUs per node."""

    gpus: int


def on_each_cluster(gpus: int = 2, jobs: int = 1):
    """Run the test on the local cluster, and on the GPU cluster the tests run in where it
    has ``gpus`` GPUs per node; ``jobs``: how many jobs the test submits there, one after
    the other (its time limit allows for their time in the queue)."""

    def decorate(test):
        @functools.wraps(test)  # pytest reads the test's own arguments
        def on_its_cluster(**arguments):
            case = arguments["cluster"]
            if isinstance(case, _OnTheGpuCluster):
                arguments["cluster"] = real_cluster(case.gpus)  # or skip, with the reason
            return test(**arguments)

        return pytest.mark.parametrize("cluster", [
            pytest.param(LOCAL, id="local", marks=[pytest.mark.slurm]),
            pytest.param(_OnTheGpuCluster(gpus), id="gpu-cluster",
                         marks=gpu_cluster_marks(gpus, jobs)),
        ])(on_its_cluster)

    return decorate
