"""What a process finds in its environment inside a Slurm job, by what started it, as seen
on the local cluster (Slurm 22.05, Open MPI 4.1.4), and the launchers that start a snippet
with those variables and no Slurm: ``srun-env`` (every task of a step) and ``started-by``
(one process, as one of :data:`STARTED_BY` would find itself).

- Nothing, in the job script itself: Slurm sets SLURM_PROCID=0, SLURM_LOCALID=0 and
  SLURM_NTASKS (the job's tasks) there too, but no SLURM_STEP_ID. Only srun starts a job
  step (``man sbatch`` and ``man srun``, OUTPUT ENVIRONMENT VARIABLES).
- srun: each task has SLURM_STEP_ID and its own SLURM_PROCID and SLURM_LOCALID.
- torchrun, one per node, started by srun: torchrun's RANK, WORLD_SIZE and LOCAL_RANK
  beside the variables of the srun task that runs torchrun.
- Open MPI's mpirun in the job script: its processes have their OMPI_COMM_WORLD_* beside
  the Slurm variables they inherit. On a node where mpirun started its daemon (orted)
  with srun, those of that step, the same in every process (SLURM_PROCID=0 and
  SLURM_NTASKS=1 on one node): seen here, where mpirun starts a daemon even on the job's
  own node, whose Slurm name is not the machine's host name. On the node where mpirun
  runs, where it starts the processes itself, those of the job script (not seen here).

A script that trusts SLURM_PROCID whenever it is set trains alone in the job script (or
waits for ranks that never come), and under mpirun every process is rank 0 of 1.
"""

from __future__ import annotations

import os
import sys

from harness.launch import Launch, Proc, launcher, reader_command

_JOB = {"SLURM_JOB_ID": "3137", "SLURM_NODEID": "0"}
_BATCH = _JOB | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2"}
_MPIRUN = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
IN_THE_JOB_SCRIPT = "nothing, in the job script"
#: What started the process: (its variables, the rank, world size and local rank a snippet
#: must read from them, or None where it must stop: no launcher started it).
STARTED_BY = {
    IN_THE_JOB_SCRIPT: (_BATCH, None),
    "srun": (_JOB | {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
                     "SLURM_NTASKS": "2"}, (1, 2, 1)),
    "torchrun in srun": (_JOB | {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                                 "SLURM_NTASKS": "2", "RANK": "3", "WORLD_SIZE": "4",
                                 "LOCAL_RANK": "1"}, (3, 4, 1)),
    "mpirun, on its own node": (_BATCH | _MPIRUN, (1, 2, 1)),
    "mpirun, in its daemon's step": (_JOB | _MPIRUN | {
        "SLURM_STEP_ID": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1"},
        (1, 2, 1)),
}
#: The ways of starting a snippet that supports srun and torchrun only.
SRUN_OR_TORCHRUN = [name for name in STARTED_BY if not name.startswith("mpirun")]


def set_by_a_launcher(name: str) -> bool:
    """Whether a launcher (Slurm, Open MPI, torchrun) sets the variable ``name``."""
    return name.startswith(("SLURM_", "OMPI_", "PMIX_")) or name in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@launcher("started-by")
def _started_by(l: Launch) -> list[Proc]:
    """``python script.py`` with the variables of option ``started_by`` (default: none, in
    the job script) and MASTER_ADDR and MASTER_PORT, and none of any other launcher's."""
    unset = [arg for name in sorted(os.environ) if set_by_a_launcher(name) for arg in ("-u", name)]
    given = STARTED_BY[l.options.get("started_by", IN_THE_JOB_SCRIPT)][0] | {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(l.port)}
    return [Proc("python", ["env", *unset, *(f"{k}={v}" for k, v in given.items()),
                            sys.executable, str(l.script), *l.args])]


def _srun_command(l: Launch, procs: list[Proc]) -> list[str]:
    """What a job script types: ``srun --ntasks=N python script.py``, after exporting the
    meeting point."""
    first = procs[0]
    proc = Proc("srun", ["srun", f"--ntasks={l.nproc * l.nnodes}", "python", *first.argv[1:]],
                {k: first.env[k] for k in ("MASTER_ADDR", "MASTER_PORT")})
    return reader_command(l, [proc])


@launcher("srun-env", command=_srun_command)
def _srun_env(l: Launch) -> list[Proc]:
    """One process per task with the variables srun sets (SLURM_JOB_ID, SLURM_STEP_ID,
    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID...) and the MASTER_ADDR and MASTER_PORT the
    job script exports.

    Options: ``master_addr`` (default 127.0.0.1), ``ranks`` (start only these tasks).
    """
    world = l.nproc * l.nnodes
    return [
        Proc(f"task{rank}", [sys.executable, str(l.script), *l.args], {
            "SLURM_JOB_ID": str(l.port), "SLURM_STEP_ID": "0",
            "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_LOCALID": str(rank % l.nproc),
            "SLURM_NODEID": str(rank // l.nproc), "SLURM_NNODES": str(l.nnodes),
            "MASTER_ADDR": l.options.get("master_addr", "127.0.0.1"), "MASTER_PORT": str(l.port),
        })
        for rank in l.options.get("ranks", range(world))
    ]
