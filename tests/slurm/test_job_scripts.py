"""What every job script of the guide must do, read from the scripts themselves, and
what the local Slurm cluster, shaped like the centre profile, says of each.

From Slurm 22.05 to 23.02, srun does not inherit sbatch's --cpus-per-task: each task
that srun starts is given one core, whatever the job asked for, unless the script
exports SRUN_CPUS_PER_TASK or passes --cpus-per-task to srun (docs/slurm/pitfalls.md).
The jobs that show it on the local cluster are in test_anatomy.py and
test_anatomy_torchrun.py.
"""

import re
import subprocess

import pytest

from harness import profile as centre
from harness.launch import SNIPPETS

#: A command line that runs srun (continuation lines joined): srun as a command, before
#: any comment on the line.
SRUN = re.compile(r"^(?:[^#\n]*[|&;(]\s*|[ \t]*)srun\b.*$", re.M)
EXPORT = re.compile(r"^export SRUN_CPUS_PER_TASK=\$SLURM_CPUS_PER_TASK\b", re.M)


def asks_for_cpus_per_task(text: str) -> bool:
    return bool(re.search(r"^#SBATCH\s+(--cpus-per-task|-c)\b", text, re.M))


#: Every job script of the guide.
JOB_SCRIPTS = sorted(SNIPPETS.glob("*/*.sbatch"))
#: Those that ask for cores per task and start tasks with srun.
SCRIPTS = [path for path in JOB_SCRIPTS
           if asks_for_cpus_per_task(path.read_text()) and SRUN.search(path.read_text())]


def name(path) -> str:
    """A job script's test id: its path under snippets/."""
    return path.relative_to(SNIPPETS).as_posix()


def test_the_scripts_with_srun_and_cores_per_task_are_all_found():
    assert {name(path) for path in SCRIPTS} >= {
        "slurm/anatomy.sbatch", "slurm/anatomy_torchrun.sbatch", "slurm/environment.sbatch",
        "slurm/multi_node.sbatch", "slurm/multi_node_torchrun.sbatch",
        "slurm/one_node.sbatch", "slurm/preemptible.sbatch", "slurm/tasks_vs_gpus.sbatch",
        "frameworks/accelerate_train.sbatch", "frameworks/horovod_train.sbatch",
        "memory/deepspeed_zero.sbatch", "performance/scaling.sbatch"}


@pytest.mark.parametrize("path", SCRIPTS, ids=name)
def test_every_srun_passes_on_the_cores_per_task(path):
    text = path.read_text().replace("\\\n", " ")
    export = EXPORT.search(text)
    for srun in SRUN.finditer(text):
        exported_before = export is not None and export.start() < srun.start()
        assert exported_before or "--cpus-per-task" in srun[0], (
            f"{path.name}: this srun gives each task one core on Slurm 22.05 to 23.02: "
            f"{srun[0].strip()}")


def sbatch_test_only(text: str, folder) -> subprocess.CompletedProcess:
    """``sbatch --test-only`` of a job script: when and where Slurm would start it."""
    (folder / "job.sbatch").write_text(text)
    return subprocess.run(["sbatch", "--test-only", "job.sbatch"], cwd=folder,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slurm
@pytest.mark.parametrize("path", JOB_SCRIPTS, ids=name)
def test_slurm_would_start_every_job_script_as_the_page_shows_it(path, tmp_path):
    """``sbatch --test-only``: the job script, rendered for the centre profile, asks for
    what a cluster of that shape has (partition, GPUs of its type, cores, memory, node
    features), so Slurm would schedule it; a request the nodes cannot meet is refused.
    The scripts' own tests then submit them and check what they did."""
    check = sbatch_test_only(centre.render_file(path), tmp_path)
    assert check.returncode == 0, f"{path.name}: {check.stderr.strip()}"
    where = re.search(r"^sbatch: Job \d+ to start at \S+ using \d+ processors on nodes? "
                      r"(\S+) in partition (\S+)$", check.stderr, re.M)
    assert where, check.stderr
    assert re.fullmatch(r"node[12]|node\[1-2\]", where[1]), check.stderr
    assert where[2] == centre.load().partition.name, check.stderr


@pytest.mark.slurm
def test_a_job_that_no_node_can_hold_is_refused(tmp_path):
    """The check above can fail: one GPU more per node than the nodes have."""
    profile = centre.load()
    part = profile.partition
    asked, more = (f"{profile.ask_gpus(part.gpu_request(n))}\n"
                   for n in (part.gpus_per_node, part.gpus_per_node + 1))
    text = centre.render_file(SNIPPETS / "slurm/one_node.sbatch")
    assert asked in text
    check = sbatch_test_only(text.replace(asked, more), tmp_path)
    assert check.returncode != 0
    assert "Requested node configuration is not available" in check.stderr, check.stderr


#: The job scripts that run PyTorch without the environment line, and why.
OWN_ENVIRONMENT = {
    "slurm/wrong_python.sbatch": "the pitfall of a job that does not set up its environment",
    "slurm/environment.sbatch": "the lesson: module lines in the block, then the activation",
}
ACTIVATE = "source .venv/bin/activate"


def runs_pytorch(text: str) -> bool:
    return bool(centre._LAUNCH.search(text))


def test_the_scripts_that_run_pytorch_are_all_found():
    assert {name(path) for path in JOB_SCRIPTS if runs_pytorch(path.read_text())} >= {
        "slurm/one_node.sbatch", "quickstart/one_node.sbatch", "slurm/no_local_rank.sbatch",
        "troubleshooting/node_health.sbatch", "slurm/stage_data.sbatch", *OWN_ENVIRONMENT}


@pytest.mark.parametrize("path", [p for p in JOB_SCRIPTS if runs_pytorch(p.read_text())],
                         ids=name)
def test_every_job_script_sets_up_its_own_environment(path):
    """Between its environment markers, before its first command, as the quickstart's do
    (a centre profile puts its module lines there instead): the tests submit every job
    from a shell where no virtual environment is active (harness/slurm.py)."""
    text = path.read_text()
    if name(path) == "slurm/wrong_python.sbatch":
        assert ACTIVATE not in text and "#>environment" not in text
        return
    if name(path) == "slurm/environment.sbatch":
        assert re.search(rf"^#<environment\n{re.escape(ACTIVATE)}$", text, re.M)
        return
    block = re.search(r"^#>environment\n(.*?)^#<environment$", text, re.M | re.S)
    assert block and block[1].startswith(ACTIVATE), (
        f"{path.name}: put `{ACTIVATE}` between `#>environment` and `#<environment`, "
        f"before the script's first command")
