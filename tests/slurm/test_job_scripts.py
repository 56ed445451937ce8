"""What every job script of the guide must do, read from the scripts themselves.

From Slurm 22.05 to 23.02, srun does not inherit sbatch's --cpus-per-task: each task
that srun starts is given one core, whatever the job asked for, unless the script
exports SRUN_CPUS_PER_TASK or passes --cpus-per-task to srun (docs/slurm/pitfalls.md).
The jobs that show it on the local cluster are in test_anatomy.py and
test_anatomy_torchrun.py.
"""

import re

import pytest

from harness.launch import SNIPPETS

#: A command line that runs srun (continuation lines joined): srun as a command, before
#: any comment on the line.
SRUN = re.compile(r"^(?:[^#\n]*[|&;(]\s*|[ \t]*)srun\b.*$", re.M)
EXPORT = re.compile(r"^export SRUN_CPUS_PER_TASK=\$SLURM_CPUS_PER_TASK\b", re.M)


def asks_for_cpus_per_task(text: str) -> bool:
    return bool(re.search(r"^#SBATCH\s+(--cpus-per-task|-c)\b", text, re.M))


#: Every job script that asks for cores per task and starts tasks with srun.
SCRIPTS = [path for path in sorted(SNIPPETS.glob("*/*.sbatch"))
           if asks_for_cpus_per_task(path.read_text()) and SRUN.search(path.read_text())]


def test_the_scripts_with_srun_and_cores_per_task_are_all_found():
    assert {path.relative_to(SNIPPETS).as_posix() for path in SCRIPTS} >= {
        "slurm/anatomy.sbatch", "slurm/anatomy_torchrun.sbatch", "slurm/environment.sbatch",
        "slurm/multi_node.sbatch", "slurm/multi_node_torchrun.sbatch",
        "slurm/one_node.sbatch", "slurm/preemptible.sbatch", "slurm/tasks_vs_gpus.sbatch",
        "frameworks/accelerate_train.sbatch", "frameworks/horovod_train.sbatch",
        "memory/deepspeed_zero.sbatch", "performance/scaling.sbatch"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(SNIPPETS).as_posix())
def test_every_srun_passes_on_the_cores_per_task(path):
    text = path.read_text().replace("\\\n", " ")
    export = EXPORT.search(text)
    for srun in SRUN.finditer(text):
        exported_before = export is not None and export.start() < srun.start()
        assert exported_before or "--cpus-per-task" in srun[0], (
            f"{path.name}: this srun gives each task one core on Slurm 22.05 to 23.02: "
            f"{srun[0].strip()}")
