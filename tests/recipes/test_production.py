"""snippets/recipes/production.sbatch, shown on docs/recipes/production_job.md.

Two copies of the job script run side by side, as the page shows it, from folders that
hold train_ddp.py, a data/ folder of the stand-in images and .venv (the tests'
environment): one torchrun per node of the profile's two nodes. One is submitted with the
page's debug switch (sbatch --export=ALL,DEBUG=1) and left alone. The other gets, while
it trains, the signal that --signal=B:USR1@300 sends 5 minutes before the time limit
(sent here as soon as it prints a loss, with scancel): both torchruns pass it on, rank 0
saves, the job removes its nodes' copies of the data, requeues itself, stages the data
again and resumes in its second run. It ends with the model, optimiser, scheduler and
scaler state of the job left alone. On a GPU cluster, the same test on the nodes and GPUs
of the job the tests run in (tests/slurm/clusters.py).
"""

import re
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from harness.launch import BIN, Result
from harness.outputs import check_output
from harness.slurm import job_info, jobs_in
from tests.compare import assert_same_state, load
from tests.recipes.runs import DDP, stand_in
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end
from tests.slurm.real_cluster import GPU_ATOL, TIMEOUT

SCRIPT = "recipes/production.sbatch"
#: The page's debug switch.
DEBUG = "--export=ALL,DEBUG=1"
#: The stand-in's images: 4 classes of 240 to train on, 101 to validate on.
IMAGES = 4 * 240 + 101
EPOCHS = 3  # the job script's --epochs
#: How far the resumed job's state may be from the uninterrupted one's, on the CPU. DDP
#: puts the gradients in a new order in its bucket after the first step of each run, so
#: the first step after the restart sums them over the 8 processes in another order
#: than the uninterrupted job did at that step (docs/slurm/preemption.md): some sums
#: differ in their last bit, and training carries that on. Measured: 4.7e-10 in the
#: model and 3.7e-9 in the momentum after 3 steps; the losses and validations printed
#: after the restart are the same.
LOCAL_ATOL = 1e-6


def folder_for_a_job(cluster, name: str) -> Path:
    """A folder as the page's reader has it: data/ (a copy of the stand-in) and .venv."""
    folder = cluster.folder(name)
    subprocess.run(["cp", "-r", str(stand_in()), str(folder / "data")], check=True)
    (folder / ".venv").symlink_to(BIN.parent)
    return folder


def wait_until_training(workdir: Path, submitted: Future, timeout: float) -> str:
    """The id of the job submitted from ``workdir``, once it has printed a loss."""
    deadline = time.monotonic() + timeout
    while not (jobs := jobs_in(workdir)):
        if submitted.done():
            submitted.result()  # raises the submission's failure
        assert time.monotonic() < deadline, f"no job from {workdir} within {timeout} s"
        time.sleep(0.1)
    output = Path(job_info(jobs[0])["StdOut"])
    while not (output.is_file() and re.search(r"^epoch \d+ step .* loss ", output.read_text(),
                                              re.M)):
        assert not submitted.done(), f"job {jobs[0]} ended before it printed a loss"
        assert time.monotonic() < deadline, f"job {jobs[0]} printed no loss within {timeout} s"
        time.sleep(0.05)
    return jobs[0]


def runs(stdout: str) -> list[str]:
    """The output file, cut into the runs of the job."""
    return re.split(r"(?m)^(?=job \d+, run \d+, )", stdout)[1:]


def assert_staged_once_per_node_and_removed(run: str, nodes: int):
    """Each node copied every file of data/ once, to a folder of its own, gone now."""
    copies = re.findall(r"^(\S+): copied (\d+) files to (\S+)$", run, re.M)
    assert len(copies) == nodes and len({node for node, *_ in copies}) == nodes, copies
    for node, count, folder in copies:
        assert int(count) == IMAGES and folder.endswith(f"-{node}"), (node, count, folder)
        assert not Path(folder).exists(), f"{folder} was left on {node}"
    return sorted(node for node, *_ in copies)


@on_each_cluster(jobs=3)
def test_a_signalled_production_job_requeues_resumes_and_ends_as_if_never_stopped(cluster):
    nodes, per_node = cluster.nodes, cluster.gpus_per_node
    world = nodes * per_node
    alone, stopped = folder_for_a_job(cluster, "production-alone-"), folder_for_a_job(
        cluster, "production-")
    shape = cluster.shape(tasks_per_gpu=False)
    timeout = cluster.pick(600, TIMEOUT)

    def submit(folder: Path, *sbatch_args: str) -> Result:
        return cluster.submit(SCRIPT, files=(DDP,), world_size=world, activate=False,
                              workdir=folder, sbatch_args=[*shape, *sbatch_args],
                              timeout=timeout)

    with ThreadPoolExecutor(2) as pool:
        reference = pool.submit(submit, alone, DEBUG)
        signalled = pool.submit(submit, stopped)
        job = wait_until_training(stopped, signalled, timeout)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True, timeout=30)
        reference, result = reference.result(), signalled.result()
    if not cluster.real:
        check_output(result)

    # Slurm: the job ran twice and then completed; the one left alone ran once.
    assert job_end(result) == {"state": "COMPLETED", "exit code": "0:0", "restarts": 1}
    assert job_end(reference) == {"state": "COMPLETED", "exit code": "0:0", "restarts": 0}
    first, second = runs(result.stdout)  # the output file holds both runs
    assert first.startswith(f"job {job}, run 1, ") and second.startswith(f"job {job}, run 2, ")

    # Each run staged the data once on each node, and removed the copies.
    for run in (first, second, *runs(reference.stdout)):
        staged = assert_staged_once_per_node_and_removed(run, nodes)
        started = sorted(re.findall(rf"^(\S+): starting torchrun, {per_node} processes$",
                                    run, re.M))
        assert started == staged  # one torchrun on each node
        assert f"{world} processes ({cluster.backend}): " in run  # all of them trained

    # The first run stopped mid-training, saved, and went back to the queue.
    steps = EPOCHS * (-(-(IMAGES - 101) // world) // 32)  # whole steps of 32 per rank
    saved = re.search(r"^SIGUSR1: asking train_ddp.py to save a checkpoint and stop\n"
                      r"(?:.*\n)*?stopped by a signal at epoch (\d+), step (\d+): saved "
                      r"production.pt; run again to resume\n"
                      r"back in the queue: the training step ended with exit code 1\n",
                      first, re.M)
    assert saved, first
    epoch, step = int(saved[1]), int(saved[2])
    assert 0 < step < steps
    assert f"resumed from production.pt at epoch {epoch}, step {step}\n" in second
    assert f"saved production.pt after epoch {EPOCHS}, step {steps}\n" in second
    assert "Traceback" not in result.stdout and "Traceback" not in reference.stdout
    # torchrun 2.13 ends on a signal with a SignalException, on each node, after its
    # processes have exited; nothing else failed
    errors = result.outputs[0].stderr
    assert len(re.findall(r"^torch\.distributed\.elastic\.multiprocessing\.api\."
                          r"SignalException: Process \d+ got signal: 10$", errors, re.M)) == nodes
    assert "ChildFailedError" not in errors and "ChildFailedError" not in reference.text

    # The resumed job ends where the job left alone ends.
    ours, theirs = load(stopped / "production.pt"), load(alone / "production.pt")
    assert (ours["epoch"], ours["step"]) == (theirs["epoch"], theirs["step"]) == (EPOCHS, steps)
    atol = cluster.pick(LOCAL_ATOL, GPU_ATOL)
    for part in ("model", "optimizer", "scheduler", "scaler"):
        assert_same_state(ours[part], theirs[part], atol=atol, what=part)
    if not cluster.real:  # and printed the same losses and validations from the restart on
        resumed = re.findall(r"^epoch .*$", second, re.M)
        uninterrupted = re.findall(r"^epoch .*$", reference.stdout, re.M)
        assert resumed and resumed == uninterrupted[-len(resumed):]

    # DEBUG=1: the commands, PyTorch's C++ log and DDP's settings; none without it.
    debug = reference.outputs[0].stderr
    assert re.search(r"^\+ srun bash -c .*exec torchrun", debug, re.M | re.S)
    cpp_info = r"\[I\d{4} [\d:.]+ \S+\] \[c10d"  # an INFO line of PyTorch's C++ code
    assert re.search(cpp_info, debug) and "DDP Initialized with" in debug
    if cluster.real:
        assert "NCCL INFO" in debug
    assert not re.search(rf"^\+ |{cpp_info}|DDP Initialized|NCCL INFO", errors, re.M)
