"""Helpers for the tests of docs/slurm: submit a job script, read what the job did.

Every job script runs on the local cluster of tools/local-slurm (two simulated nodes,
node1 and node2, shaped like the centre profile: GPUS declared GPUs each) through the
``sbatch`` launcher of harness/slurm.py, as the page shows it for that profile and with
no option on sbatch's command line. Figures that depend on the cluster (world sizes,
cores per task) come from the profile, never from a literal 4.
"""

from __future__ import annotations

import re
import subprocess

import torch

from harness import profile as centre
from harness.launch import Result, run
from tests.compare import assert_same_state, load

#: The centre profile the tests run with (CENTRE, or profiles/default.toml).
PROFILE = centre.load()
#: GPUs per node of the partition the job scripts use, and CPU cores per GPU there.
GPUS = PROFILE.gpus_per_node
CPUS_PER_GPU = PROFILE.partition.cpus_per_gpu
#: What Lmod prints when a module line fails (the job goes on without the module).
LMOD_ERROR = "Lmod has detected the following error"
#: Makes the job's sruns say, on the job's standard error, how many CPUs each step asks for.
SRUN_DEBUG = {"SLURM_DEBUG": "2"}


def submit(script: str, *args: str, files: tuple[str, ...] = ("slurm/train.py",),
           world_size: int = 0, timeout: float = 300, **options) -> Result:
    """``sbatch script`` from a folder holding ``files``; the job's output is the stdout.

    ``world_size`` is the number of ranks that must join a process group (0: none). The
    time limit allows for a machine busy with other work: a job waits in the queue, and
    every process imports torch.
    """
    result = run(script, *args, launcher="sbatch", files=files, world_size=world_size,
                 timeout=timeout, **options)
    assert LMOD_ERROR not in result.text, result.report()  # the profile's module lines ran
    return result


def job_end(result: Result) -> dict[str, str]:
    """How the job ended, from the poller's last line: state, exit code, restarts."""
    line = re.search(r"poller: job \d+ ended: (\w+), exit code (\S+), restarts (\d+)",
                     result.outputs[0].stderr)
    assert line, result.report()
    return {"state": line[1], "exit code": line[2], "restarts": int(line[3])}


def run_seconds(result: Result) -> int:
    """Seconds the job ran (Slurm's RunTime, from the poller's last line): without the time
    it waited in the queue, which a loaded machine makes long."""
    line = re.search(r"poller: job \d+ ended: .*, ran (?:(\d+)-)?(\d+):(\d+):(\d+);",
                     result.outputs[0].stderr)
    assert line, result.report()
    days, hours, minutes, seconds = (int(part or 0) for part in line.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def placement(stdout: str) -> tuple[int, dict[str, list[int]]]:
    """World size and ranks per node, from train.py's first line."""
    line = re.search(r"^world size (\d+) \(\w+ on \w+\): (.*)$", stdout, re.M)
    assert line, stdout
    nodes = {}
    for first, last, node in re.findall(r"ranks? (\d+)(?:-(\d+))? on (\S+?)(?:,|$)", line[2]):
        nodes[node] = list(range(int(first), int(last or first) + 1))
    return int(line[1]), nodes


#: train.py's first line, with the backend and the device it trained on.
WORLD = r"^world size \d+ \((?P<backend>\w+) on (?P<device>\w+)\): "


def backend(stdout: str) -> str:
    """"gloo on cpu" or "nccl on cuda", from train.py's first line."""
    line = re.search(WORLD, stdout, re.M)
    assert line, stdout
    return f"{line['backend']} on {line['device']}"


def job_nodes(result: Result) -> list[str]:
    """The nodes the job was given (all of them, used or not), from the poller's log."""
    given = re.findall(r"^poller: job \d+: \w+, restarts \d+, nodes (\S+)$",
                       result.outputs[0].stderr, re.M)
    assert given, result.report()
    names = subprocess.run(["scontrol", "show", "hostnames", given[-1]], capture_output=True,
                           text=True, timeout=30, check=True)
    return names.stdout.split()


def on_one_node(stdout: str) -> tuple[int, list[int]]:
    """World size and the ranks of a job that ran on one node, whichever node the shared
    cluster had free (fails if the ranks are spread over several)."""
    ranks, nodes = placement(stdout)
    assert len(nodes) == 1, nodes
    return ranks, next(iter(nodes.values()))


def whereami(stdout: str) -> list[tuple]:
    """(rank, world size, node, local rank, GPU, CUDA_VISIBLE_DEVICES, threads) for every
    line whereami.py printed, in the order printed."""
    return [(int(r), int(w), node, int(local), int(gpu), visible, threads)
            for r, w, node, local, gpu, visible, threads in re.findall(
                r"^rank (\d+) of (\d+): (\S+), local rank (\d+), cuda:(\d+), "
                r"CUDA_VISIBLE_DEVICES=(\S*), OMP_NUM_THREADS=(\S*)$", stdout, re.M)]


def srun_steps(result: Result) -> list[tuple[int, int]]:
    """(CPUs, tasks) of every step the job's sruns started, from a job run with SRUN_DEBUG.

    The local cluster binds no task to cores, and every task inherits the batch script's
    SLURM_CPUS_PER_TASK whatever srun asked for: what srun asked for is the evidence.
    """
    return [(int(cpus), int(tasks)) for cpus, tasks in re.findall(
        r"^srun: debug: +cpus (\d+), tasks (\d+),", result.text, re.M)]


def losses(stdout: str) -> list[str]:
    """The loss lines train.py printed."""
    return re.findall(r"^epoch .* loss .*$", stdout, re.M)


def checkpoint(result: Result, name: str = "checkpoint.pt") -> dict:
    """The checkpoint train.py left in the job's folder."""
    return load(result.workdir / name)


def assert_same_training(result: Result, reference: Result, name: str = "checkpoint.pt",
                         atol: float = 0.0) -> None:
    """Both jobs ended with the same model and optimiser state: bit for bit, or within
    ``atol`` (GPUs: the same sums, added up in another order)."""
    ours, theirs = checkpoint(result, name), checkpoint(reference, name)
    assert ours["step"] == theirs["step"] and ours["config"] == theirs["config"]
    for part in ("model", "optimizer"):
        a, b = _tensors(ours[part]), _tensors(theirs[part])
        assert a, part
        assert_same_state(a, b, atol, what=part)


def _tensors(tree, prefix="") -> dict[str, torch.Tensor]:
    """Every tensor in a nested state dict, by its path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(
        tree, (list, tuple)) else ()
    return {k: v for key, sub in items for k, v in _tensors(sub, f"{prefix}/{key}").items()}
