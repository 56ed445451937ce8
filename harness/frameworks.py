"""Launchers for the snippets of docs/frameworks and DeepSpeed: Horovod's
``horovodrun``, DeepSpeed's ``deepspeed``, Accelerate's ``accelerate launch``, and
TensorFlow's workers (in the venv of their own that `make test-extras` creates)."""

from __future__ import annotations

import json
import os
import sys

from harness.launch import (BIN, DEVICE_ENV, READER_PORT, ROOT, Launch, Proc, free_port,
                            launcher, reader_command)

#: TensorFlow lives in a venv of its own; `make test-extras` creates it.
TF_VENV = ROOT / ".venv-tf"
TF_PYTHON = TF_VENV / "bin" / "python"


@launcher("horovodrun")
def _horovodrun(l: Launch) -> list[Proc]:
    """``horovodrun -np N -H localhost:N --gloo python script.py`` (``--gloo``: without MPI)."""
    n = l.nproc * l.nnodes
    return [Proc("horovodrun", [str(BIN / "horovodrun"), "-np", str(n), "-H", f"localhost:{n}",
                                "--gloo", sys.executable, str(l.script), *l.args])]


@launcher("deepspeed")
def _deepspeed(l: Launch) -> list[Proc]:
    """``deepspeed --num_gpus=N --master_port=PORT script.py``: DeepSpeed's launcher starts
    the ranks with ``--local_rank=N``; the run's port."""
    return [Proc("deepspeed", [str(BIN / "deepspeed"), f"--num_gpus={l.nproc}",
                               f"--master_port={l.port}", str(l.script), *l.args])]


@launcher("accelerate")
def _accelerate(l: Launch) -> list[Proc]:
    """``accelerate launch FLAGS script.py``, FLAGS from the option ``flags``; the run's port."""
    return [Proc("accelerate", [str(BIN / "accelerate"), "launch", *l.options["flags"],
                                "--main_process_port", str(l.port), str(l.script), *l.args])]


def tf_gpus(l: Launch) -> dict[str, str]:
    """The environment that hides the GPUs from TensorFlow in the run of a test not marked
    multigpu: CUDA_VISIBLE_DEVICES empty, unless the test names GPUs itself. TensorFlow
    gets no patch like PyTorch's (harness/site/sitecustomize.py); where .venv-tf has CUDA,
    each worker would otherwise take every GPU of the node, and print so."""
    if os.environ.get(DEVICE_ENV) == "cpu" and "CUDA_VISIBLE_DEVICES" not in l.env:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {}


@launcher("tf-python")
def _tf_python(l: Launch) -> list[Proc]:
    """``python script.py`` with the TensorFlow venv's Python."""
    return [Proc("python", [str(TF_PYTHON), str(l.script), *l.args], tf_gpus(l))]


def _tf_workers_command(l: Launch, procs: list[Proc]) -> list[str]:
    """A line per worker, as on a node of its own; the workers' ports shown from
    :data:`READER_PORT` on."""
    workers = [f"127.0.0.1:{READER_PORT + i}" for i in range(len(procs))]
    return reader_command(l, [
        Proc(p.name, p.argv, {**p.env, "TF_CONFIG": json.dumps(
            {**json.loads(p.env["TF_CONFIG"]), "cluster": {"worker": workers}})})
        for p in procs])


@launcher("tf-workers", command=_tf_workers_command)
def _tf_workers(l: Launch) -> list[Proc]:
    """One TensorFlow worker per node, each told the cluster and its place in TF_CONFIG,
    as the job script of docs/frameworks/tensorflow.md does."""
    ports = [l.port] + [free_port() for _ in range(l.nnodes - 1)]
    workers = [f"127.0.0.1:{port}" for port in ports]
    return [Proc(f"worker{i}", [str(TF_PYTHON), str(l.script), *l.args], {
        "TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}),
        **tf_gpus(l),
    }) for i in range(l.nnodes)]


@launcher("tf-srun")
def _tf_srun(l: Launch) -> list[Proc]:
    """One task per process with the variables srun sets, on one node called localhost;
    ``--port`` gives the first worker's port (the others use the next ones)."""
    world = l.nproc * l.nnodes
    return [Proc(f"task{rank}", [str(TF_PYTHON), str(l.script), *l.args, "--port", str(l.port)], {
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(world),
        **tf_gpus(l),
    }) for rank in range(world)]
