"""tests/slurm/real_cluster.py, which the multigpu tests of the job scripts use to submit
them to the GPU cluster the tests run in: what it asks for, when it skips, and that the
jobs it submits do not inherit the variables of the job the tests run in (checked on the
local cluster, standing in for the real one)."""

import re

import pytest

from harness import slurm
from harness.launch import run
from tests.slurm import real_cluster as real
from tests.slurm.real_cluster import RealCluster, real_cluster

JOB = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_ON_NODE": "16",
       "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_ACCOUNT": "proj"}


@pytest.fixture
def in_a_job(monkeypatch):
    """As inside a job of 3 nodes with 4 GPUs and 16 cores each, on a real cluster."""
    for name, value in JOB.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_QOS", raising=False)
    monkeypatch.setattr(slurm, "OUTER_SLURM_CONF", None)


def test_outside_a_job_the_tests_are_skipped(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not inside a Slurm job"):
        real_cluster()


def test_a_job_with_too_few_gpus_skips_them(in_a_job, monkeypatch):
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "1")
    with pytest.raises(pytest.skip.Exception,
                       match="needs a job with 2 GPUs per node, this job has 1"):
        real_cluster()


def test_a_job_of_the_local_test_cluster_skips_them(in_a_job, monkeypatch, tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "gpu0").symlink_to("/dev/null")  # as tools/local-slurm/start makes it
    monkeypatch.setattr(slurm, "OUTER_SLURM_CONF", str(tmp_path / "slurm.conf"))
    with pytest.raises(pytest.skip.Exception, match="local test cluster"):
        real_cluster()


def test_the_jobs_ask_for_what_the_job_has(in_a_job):
    cluster = real_cluster()
    assert cluster == RealCluster(2, 4, 4, ("--partition=gpu", "--account=proj"))
    assert cluster.shape() == ["--nodes=2", "--gpus-per-node=4", "--ntasks-per-node=4",
                               "--cpus-per-task=4"]
    assert cluster.shape(tasks_per_gpu=False, nodes=1, gpus_per_node=2) == [
        "--nodes=1", "--gpus-per-node=2", "--ntasks-per-node=1", "--cpus-per-task=8"]


@pytest.mark.slurm
def test_the_jobs_do_not_inherit_the_variables_of_the_job_the_tests_run_in(
        in_a_job, monkeypatch, tmp_path, slurm_cluster):
    monkeypatch.setattr(slurm, "OUTER_SLURM_CONF", str(slurm_cluster))  # the local one here
    for name, value in {"SLURM_CPUS_PER_TASK": "16", "SRUN_CPUS_PER_TASK": "16",
                        "SBATCH_PARTITION": "nowhere"}.items():
        monkeypatch.setenv(name, value)  # which would reach the job, and its sruns
    monkeypatch.delenv("SLURM_CONF")  # as in a job of a cluster with its default config
    script = tmp_path / "show_env.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --output=%x-%j.out\n"
                      "echo \"job $SLURM_JOB_ID\"; env | grep -E '^(SLURM|SRUN|SBATCH)_' | sort\n")
    cluster = RealCluster(1, 1, 1, ("--partition=debug",))
    result = real.submit_real(cluster, str(script), files=(), workdir=tmp_path / "job")
    job_id = re.search(r"^poller: submitted batch job (\d+)$", result.outputs[0].stderr, re.M)[1]
    assert f"job {job_id}\n" in result.stdout
    assert "SLURM_JOB_PARTITION=debug\n" in result.stdout
    assert not re.search(r"^(SLURM_CPUS_PER_TASK|SRUN_|SBATCH_)", result.stdout, re.M)
    assert f"SLURM_CONF={slurm_cluster}\n" in result.stdout
