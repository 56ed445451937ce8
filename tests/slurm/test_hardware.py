"""snippets/slurm/hardware.sbatch, shown on docs/slurm/hardware.md: a GPU type, a node
feature, the whole node (where a job may have all its CPUs) and host memory per GPU.

The local cluster's nodes have the GPU type and the features of the centre profile's
partition (tools/local-slurm/start; the default's: a100, and a100 and ib), so the script
is submitted as the page shows it for that profile. ``--qos`` is not in it: without a
Slurm accounting database, as on the local cluster, Slurm accepts any QOS name and
applies none, so a test could not tell whether it worked. On a GPU cluster, the first
test submits it with that cluster's GPU type and a feature of its node
(tests/slurm/clusters.py).
"""

import os
import re
import subprocess

import pytest

from harness.outputs import check_output
from harness.slurm import cluster_shape
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, PROFILE, job_end, submit

SCRIPT = "slurm/hardware.sbatch"
PART = PROFILE.partition
#: The GRES type of the local cluster's GPUs, and the CPUs of its nodes (the partition's
#: cores x threads where the profile gives them, else its GPUs' cores).
LOCAL_TYPE = cluster_shape(PROFILE)["LOCAL_SLURM_GPU_TYPE"]
NODE_CPUS = int(cluster_shape(PROFILE)["LOCAL_SLURM_CPUS"])
#: A GPU type and feature that no node of the local cluster has.
MISSING = "b200"


def recorded(stdout: str) -> dict[str, str]:
    """The KEY=value lines the job printed from scontrol (job and node)."""
    return dict(re.findall(r"^(\w+)=(\S+)$", stdout, re.M))


def seen(stdout: str) -> tuple[str, int, str, int, str]:
    """(node, GPUs, CUDA_VISIBLE_DEVICES, CPUs, SLURM_MEM_PER_GPU) from the job's last line."""
    line = re.search(r"^(\w+): (\d+) GPUs, CUDA_VISIBLE_DEVICES=(\S*), (\d+) CPUs, "
                     r"SLURM_MEM_PER_GPU=(\d*)$", stdout, re.M)
    assert line, stdout
    return line[1], int(line[2]), line[3], int(line[4]), line[5]


@on_each_cluster()
def test_the_job_gets_every_gpu_of_a_whole_node_of_the_type_and_feature_asked_for(
        cluster, monkeypatch):
    """The default profile: 4 a100 GPUs on a whole ib node, 60 GB per GPU (the page's
    output); another profile: its type (if any), last feature (if any) and memory per GPU,
    on a whole node where a job may have all its CPUs; where it may not (ZIH's 46 of 48),
    the script shown has no ``--exclusive``, and the job, accepted, gets one CPU per task.
    On a GPU cluster, the script with that cluster's GPU type and one of its node's
    features (when the node has them), on one node, with as many GPUs as the tests' job
    has, 8 GB each."""
    cluster.use(monkeypatch)  # node_offers asks the cluster's scontrol
    sbatch_args = as_this_node_offers(cluster, mem_per_gpu=8) if cluster.real else []
    job = cluster.submit(SCRIPT, files=(), sbatch_args=sbatch_args)
    if not cluster.real:
        check_output(job)
    assert job_end(job)["state"] == "COMPLETED"
    node, gpus, visible, cpus, mem = seen(job.stdout)
    assert gpus == cluster.gpus_per_node and len(visible.split(",")) == gpus
    assert mem == str(cluster.pick(PART.mem_per_gpu_mb, 8 * 1024))  # MB per GPU
    if cluster.real:
        return  # the rest is the local cluster's: its nodes, their cores, features and type
    got = recorded(job.stdout)
    assert got["TresPerNode"] == f"gres:gpu:{PART.gpu_request(typed=True)}"  # type and count
    assert got["Features"] == (PART.features[-1] if PART.features else "(null)")
    assert got["MemPerTres"] == f"gres:gpu:{PART.mem_per_gpu_mb}"  # MB per GPU
    # --exclusive: every core of the node; without it, one CPU for each task
    node_cpus = GPUS if PART.refuses_whole_nodes else NODE_CPUS
    assert got["NumCPUs"] == str(node_cpus)
    assert got["ActiveFeatures"].split(",") == (list(PART.features) or ["(null)"])
    assert got["Gres"] == f"gpu:{LOCAL_TYPE}:{GPUS}"
    assert node in ("node1", "node2")
    assert (gpus, visible, cpus, mem) == (
        GPUS, ",".join(map(str, range(GPUS))), node_cpus, str(PART.mem_per_gpu_mb))


@pytest.mark.slurm
def test_a_gpu_type_or_feature_the_cluster_lacks_is_rejected_at_submission():
    assert MISSING not in (LOCAL_TYPE, *PART.features)
    for option, error in ((PROFILE.ask_gpus(f"{MISSING}:{GPUS}"),  # as the script asks
                           "Requested node configuration is not available"),
                          (f"--constraint={MISSING}", "Invalid feature specification")):
        job = submit(SCRIPT, files=(), sbatch_args=[option], check=False, timeout=60)
        assert job.returncode != 0, option
        assert f"sbatch: error: Batch job submission failed: {error}" in job.text, job.text
        assert "submitted batch job" not in job.text  # never queued


def node_offers() -> tuple[str, str]:
    """(GPU type, a feature) of the node the GPU tests run on, for a job that asks for them."""
    node = subprocess.run(["scontrol", "show", "node", os.environ["SLURMD_NODENAME"]],
                          capture_output=True, text=True, timeout=30).stdout
    gpu_type = re.search(r"Gres=gpu:(\w+):", node)
    features = re.search(r"ActiveFeatures=(\S+)", node)
    return (gpu_type[1] if gpu_type else ""), (
        features[1].split(",")[0] if features and features[1] != "(null)" else "")


def as_this_node_offers(cluster, mem_per_gpu: int) -> list[str]:
    """sbatch options for one node of the GPU cluster with the GPU type and a feature of the
    node the tests run on (:func:`node_offers`), its job's GPUs, ``mem_per_gpu`` GB each."""
    gpu_type, feature = node_offers()
    gpus = f"{gpu_type}:{cluster.gpus_per_node}" if gpu_type else str(cluster.gpus_per_node)
    return ["--nodes=1", f"--gpus-per-node={gpus}", f"--ntasks-per-node={cluster.gpus_per_node}",
            f"--mem-per-gpu={mem_per_gpu}G", *([f"--constraint={feature}"] if feature else [])]
