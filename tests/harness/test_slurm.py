"""harness/slurm.py and tools/local-slurm: the local cluster takes the shape of a centre
profile, and enforces the limits of its partitions that Slurm can enforce.

A profile written for the test caps a job's CPUs and memory on one partition and takes
jobs of one node only on another. Its cluster (one more start of tools/local-slurm, about
a second) accepts the job scripts the profile renders, and refuses at submission, with
Slurm's own message, the same scripts asking for more than a limit: a reader would see
that line from sbatch on the centre's cluster.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import profile, slurm
from harness.launch import SNIPPETS

#: Nodes of 36 cores and 250 GB (256000 MB). On gpu, the default partition, a job may
#: have 34 cores of a node and all its memory; on single, one node and 240 GB of it,
#: and jobs there do not ask for memory (Slurm gives them the partition's default).
LIMITS = """
[cluster]
name = "Limits"
login_host = "login.limits.example.org"
ask_memory = true

[[partitions]]
name = "gpu"
default = true
gpus_per_node = 4
cpus_per_gpu = 8
mem_per_gpu = "60G"
cores_per_node = 36
max_cpus_per_job = 34
mem_per_node = "250G"

[[partitions]]
name = "single"
gpus_per_node = 4
cpus_per_gpu = 8
mem_per_gpu = "60G"
mem_per_node = "240G"
max_nodes = 1
ask_memory = false
"""


def load(folder: Path, text: str = LIMITS) -> profile.Profile:
    (folder / "limits.toml").write_text(text)
    return profile.load(folder / "limits.toml")


def test_the_cluster_takes_the_nodes_and_the_limits_of_the_profile(tmp_path):
    """The nodes of the first partition: its cores (not its GPUs' CPUs) and the memory a
    job may have; each partition's limits as slurm.conf spells them."""
    assert slurm.cluster_shape(load(tmp_path)) == {
        "LOCAL_SLURM_GPUS": "4", "LOCAL_SLURM_GPU_TYPE": "a100", "LOCAL_SLURM_FEATURES": "",
        "LOCAL_SLURM_CPUS": "36", "LOCAL_SLURM_MEMORY": "256000",
        "LOCAL_SLURM_PARTITIONS": "gpu,MaxMemPerNode=256000,MaxCPUsPerNode=34 "
                                  "single,MaxNodes=1,MaxMemPerNode=245760,"
                                  "DefMemPerNode=245760 debug"}


def test_one_partition_with_nodes_of_two_gpu_types_has_the_limits_they_share(tmp_path):
    """Slurm's limits are the partition's, whichever nodes a job gets: of two entries of
    one name, only a limit both have holds, at the looser value (Alvis's A40 nodes take
    jobs of one node, its A100 nodes of several: no MaxNodes)."""
    text = LIMITS.replace('name = "single"', 'name = "gpu"\ngpu_type = "a40"').replace(
        "max_nodes = 1", "max_nodes = 1\nmax_cpus_per_job = 33")
    centre = load(tmp_path, text)
    assert slurm.partition_limits(centre, "gpu", 256000) == [
        "MaxMemPerNode=256000", "MaxCPUsPerNode=34"]  # no default memory: all of a node
    assert slurm.partition_limits(centre, "debug", 256000) == []


# --- On a cluster of that shape -------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(profile, slurm.conf) of a cluster of the test's own, stopped at the end, with
    nothing of it left running."""
    folder = tmp_path_factory.mktemp("limits")
    centre = load(folder)
    conf = slurm.start_cluster(folder / "cluster", centre)
    yield centre, conf
    slurm.stop_cluster(folder / "cluster")
    assert not slurm.cluster_processes(conf)


def sbatch(conf: Path, text: str, folder: Path, *options: str) -> subprocess.CompletedProcess:
    (folder / "job.sbatch").write_text(text)
    return subprocess.run(["sbatch", *options, "job.sbatch"], cwd=folder, capture_output=True,
                          text=True, timeout=60, env=os.environ | {"SLURM_CONF": str(conf)})


def render(centre: profile.Profile, script: str, partition: str) -> str:
    return profile.render_file(SNIPPETS / script, centre, partition)


#: Job scripts of one and of two nodes, of one task per GPU and of one torchrun per node.
SCRIPTS = ("slurm/one_node.sbatch", "slurm/one_node_torchrun.sbatch",
           "slurm/multi_node.sbatch", "quickstart/two_nodes.sbatch")


@pytest.mark.slurm
def test_the_job_scripts_the_profile_renders_are_accepted(cluster, tmp_path):
    """For each partition, every script it is shown for (single: those of one node);
    on single without a memory request (the partition's default memory)."""
    centre, conf = cluster
    for part in centre.partitions:
        for script in SCRIPTS:
            try:
                text = render(centre, script, part.name)
            except profile.TooManyNodes:
                assert part.name == "single" and "one_node" not in script
                continue
            check = sbatch(conf, text, tmp_path, "--test-only")
            assert check.returncode == 0, f"{script} on {part.name}: {check.stderr}"
            assert f" in partition {part.name}\n" in check.stderr, check.stderr
            assert ("--mem" in text) == (part.name == "gpu"), text


#: (what, job script, partition it is rendered for, line of it, the line above the limit,
#: sbatch's error): each a limit of the profile.
ABOVE = [
    ("cpus", "slurm/one_node.sbatch", "gpu", "#SBATCH --cpus-per-task=8",
     "#SBATCH --cpus-per-task=9",  # 36 of the node's 36 CPUs, above the cap of 34
     "Requested node configuration is not available"),
    ("whole-node", "slurm/hardware.sbatch", "gpu",  # the line the profile leaves out
     "# No --exclusive here: it would ask for all 36 CPUs of a node, and a job may have 34",
     "#SBATCH --exclusive", "Requested node configuration is not available"),
    ("node-memory", "slurm/one_node.sbatch", "gpu", "#SBATCH --mem=240G", "#SBATCH --mem=251G",
     "Memory required by task is not available"),
    ("partition-memory", "slurm/one_node.sbatch", "single", "#SBATCH --time=00:10:00",
     "#SBATCH --time=00:10:00\n#SBATCH --mem=241G",  # within the node's 250G
     "Memory required by task is not available"),
    ("nodes", "slurm/multi_node.sbatch", "gpu", "#SBATCH --nodes=2",
     "#SBATCH --nodes=2\n#SBATCH --partition=single",
     "Node count specification invalid"),
]


@pytest.mark.slurm
@pytest.mark.parametrize("what, script, partition, line, above, error", ABOVE,
                         ids=[case[0] for case in ABOVE])
def test_a_job_script_above_a_limit_of_its_partition_is_refused(cluster, tmp_path, what,
                                                                 script, partition, line,
                                                                 above, error):
    """Refused when submitted, with sbatch's line, and never queued; where the nodes could
    hold the job, the same script on a partition without limits is accepted: the refusal
    is the partition's."""
    centre, conf = cluster
    text = render(centre, script, partition)
    assert re.search(rf"(?m)^{re.escape(line)}(\s|$)", text), text
    if above:
        text = text.replace(f"{line}\n", f"{above}\n")
        assert above in text
    refused = sbatch(conf, text, tmp_path)
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr == f"sbatch: error: Batch job submission failed: {error}\n"
    if what != "node-memory":
        elsewhere = re.sub(r"(?m)^#SBATCH --partition=\S+\n", "", text).replace(
            "#!/bin/bash\n", "#!/bin/bash\n#SBATCH --partition=debug\n", 1)
        check = sbatch(conf, elsewhere, tmp_path, "--test-only")
        assert check.returncode == 0 and " in partition debug\n" in check.stderr, check.stderr
