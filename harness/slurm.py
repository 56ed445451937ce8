"""Submit job scripts to a real Slurm cluster, as a reader does, and wait for them.

The ``sbatch`` launcher runs this file as a small poller process: it submits the
job script unchanged with ``sbatch`` from the run's directory, follows the job
with ``scontrol show job`` every half second (``sbatch --wait`` polls far more
slowly), waits through requeues until the job's last run ends, prints the job's
output file on its own standard output and exits with the job's exit code.
Stopped with SIGTERM (the run's time limit), it cancels the job first.

The job inherits the poller's environment (``sbatch`` exports it by default): the
harness's variables (none that a reader's job lacks: harness/launch.py NOT_THE_READERS),
from a shell where no virtual environment is active; the job script activates the
tests' one, linked as ``.venv`` in the folder the job runs in, as a reader's activates
theirs.

Also here: starting and stopping the throwaway cluster of ``tools/local-slurm``
for the test session, and the few queries the tests make about jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run as `python harness/slurm.py`: import the package
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from harness import profile as centre
from harness.launch import (BIN, COMMANDS, LAUNCHERS, ROOT, RUN_TAG, SESSION_TAG, Launch, Proc,
                            launcher, reader_command, shell)

LOCAL_SLURM = ROOT / "tools" / "local-slurm"
POLL_SECONDS = 0.5
#: States a job does not leave (a requeued job goes to PENDING instead).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
#: The cluster the tests run in (tests/slurm/real_cluster.py), read before a test of the
#: session starts the local cluster (which sets SLURM_CONF for the rest of the session);
#: None: Slurm's default.
OUTER_SLURM_CONF = os.environ.get("SLURM_CONF")
#: Variables of the job the tests run in, which the jobs they submit must not inherit.
JOB_VARIABLES = ("SLURM_", "SRUN_", "SBATCH_", "SALLOC_")


# --- Jobs ---------------------------------------------------------------------------------

def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, ExitCode, Restarts, StdOut...), or {}."""
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return {}
    return dict(field.split("=", 1) for field in out.stdout.split() if "=" in field)


def jobs_in(workdir: Path) -> list[str]:
    """Ids of the queued or running jobs whose working directory is ``workdir``."""
    out = subprocess.run(["squeue", "--noheader", "--format=%i %Z"],
                         capture_output=True, text=True, timeout=30, check=True)
    return [line.split()[0] for line in out.stdout.splitlines()
            if line.split()[1:] == [str(workdir)]]


def exit_status(info: dict[str, str]) -> int:
    """Shell-style exit status of a finished job: its exit code, 128 + signal, or 1."""
    code, sig = (int(x) for x in info.get("ExitCode", "1:0").split(":"))
    if sig:
        return 128 + sig
    if info.get("JobState") != "COMPLETED" and code == 0:
        return 1
    return code


def _log(message: str) -> None:
    print(f"poller: {message}", file=sys.stderr, flush=True)


def _print_file(path: str, stream) -> None:
    if path and Path(path).is_file():
        stream.write(Path(path).read_text(errors="replace"))
        stream.flush()


def follow(sbatch_argv: list[str], poll: float = POLL_SECONDS) -> int:
    """``sbatch --parsable ARGV``; wait for the job's last run; print its output."""
    submitted = subprocess.run(["sbatch", "--parsable", *sbatch_argv],
                               capture_output=True, text=True, timeout=60)
    sys.stderr.write(submitted.stderr)
    if submitted.returncode != 0:
        _log(f"sbatch failed with exit code {submitted.returncode}")
        return submitted.returncode
    job_id = submitted.stdout.strip().split(";")[0]
    _log(f"submitted batch job {job_id}")

    def cancel(signum, frame):
        _log(f"stopped by signal {signum}: cancelling job {job_id}")
        subprocess.run(["scancel", job_id], timeout=10)
        info = job_info(job_id)
        _print_file(info.get("StdOut", ""), sys.stdout)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, cancel)
    signal.signal(signal.SIGINT, cancel)
    seen = None
    while True:
        info = job_info(job_id)
        state = (info.get("JobState"), info.get("Restarts"), info.get("NodeList"))
        if state != seen:
            _log(f"job {job_id}: {state[0]}, restarts {state[1]}, nodes {state[2]}")
            seen = state
        if info.get("JobState") in FINAL_STATES:
            break
        time.sleep(poll)
    _print_file(info.get("StdOut", ""), sys.stdout)
    if info.get("StdErr") != info.get("StdOut"):
        _print_file(info.get("StdErr", ""), sys.stderr)
    status = exit_status(info)
    _log(f"job {job_id} ended: {info['JobState']}, exit code {info.get('ExitCode')}, "
         f"restarts {info.get('Restarts')}, ran {info.get('RunTime')}; exit status {status}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    submit = sub.add_parser("submit", help="sbatch ARGS..., wait for the job, print its output")
    submit.add_argument("--poll", type=float, default=POLL_SECONDS,
                        help="seconds between queries")
    submit.add_argument("sbatch_argv", nargs=argparse.REMAINDER,
                        help="sbatch's options, the job script and its arguments (after --)")
    args = parser.parse_args(argv)
    sbatch_argv = args.sbatch_argv[1:] if args.sbatch_argv[:1] == ["--"] else args.sbatch_argv
    return follow(sbatch_argv, args.poll)


# --- Launchers ----------------------------------------------------------------------------

#: What lets Open MPI's mpirun, which refuses to run as root, run in a job the tests submit
#: as root (containers, CI), as ``--allow-run-as-root`` does for the ``mpirun`` launcher of
#: harness/launch.py; the job script stays as the page shows it: readers never need it.
MPIRUN_AS_ROOT = ({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
                  if os.geteuid() == 0 else {})


def _sbatch_command(l: Launch, procs: list[Proc]) -> list[str]:
    """``sbatch [OPTIONS] script.sbatch [ARGS]``, typed in the folder that holds the script,
    or with ``submit_dir``, there, naming the script by its path from there (the harness
    follows the job to its end and prints its output file; where that file goes, the
    test's ``--output``, is the test's business)."""
    options = [o for o in l.options.get("sbatch_args", ()) if not o.startswith("--output=")]
    script = l.script.name
    if l.options.get("submit_dir") is not None:
        script = os.path.relpath(l.script, l.options["submit_dir"])
    return reader_command(l, [Proc("sbatch", ["sbatch", *options, script, *l.args])])


@launcher("sbatch", command=_sbatch_command)
def _sbatch(l: Launch) -> list[Proc]:
    """``sbatch [OPTIONS] script.sbatch [ARGS]`` from the run's directory, followed to the end.

    The job script is written into the working directory as the page shows it (for a
    job script, rendered for the centre profile, ``harness/profile.py``; other files
    unchanged) and submitted from there, as a reader submits it from the folder that
    holds its companion files (``files=`` of :func:`harness.launch.run`). When the
    profile's set-up lines load modules, the job sees an Lmod tree of modules of those
    names (:func:`module_tree`).

    Every job script sets up its own software environment (``source .venv/bin/activate``
    between its ``#>environment`` markers, or the profile's module lines there): the job
    runs where the tests' virtual environment is linked as ``.venv``, submitted from a
    shell where no virtual environment is active, so that a job that relies on the
    submitting shell's fails as it would for a reader who submits from a fresh login.

    Options: ``sbatch_args`` (options on sbatch's command line, which override the
    script's ``#SBATCH`` lines), ``activate`` (default False; True: submit from a shell
    where the tests' virtual environment is active), ``submit_dir`` (submit from
    there instead, naming the script by its path relative to it), ``profile`` (render
    for this profile instead of the centre's: one that fits the local cluster).
    """
    submit_dir = l.options.get("submit_dir")
    profile = l.options.get("profile") or centre.load()
    if centre.needs_rendering(l.script):
        copy = l.workdir / l.script.name
        copy.write_text(centre.render_file(l.script, profile))
    else:
        copy = Path(shutil.copy(l.script, l.workdir))
    script = copy.name if submit_dir is None else os.path.relpath(copy, submit_dir)
    venv = Path(submit_dir or l.workdir) / ".venv"
    if not venv.exists():  # the reader's environment where the job runs: the tests'
        venv.symlink_to(BIN.parent)
    env = shell(l.options.get("activate", False)) | module_env(profile, l.workdir) | MPIRUN_AS_ROOT
    env |= container_env(profile, l.workdir, env["PATH"])
    argv = [sys.executable, str(Path(__file__).resolve()), "submit", "--",
            *l.options.get("sbatch_args", ()), script, *l.args]
    if submit_dir is not None:
        argv = ["env", "-C", str(submit_dir), *argv]
    return [Proc("sbatch", argv, env)]


@launcher("srun")
def _srun(l: Launch) -> list[Proc]:
    """``srun --nodes=N --ntasks-per-node=n --time=T [SRUN_ARGS] python script.py [ARGS]``.

    Typed on a login node, this allocates nodes, runs the tasks and returns. The
    script is copied into the working directory and started from there. Options:
    ``time`` (default 00:05:00), ``srun_args``, ``activate`` as for ``sbatch``, and
    ``master`` (export MASTER_ADDR and MASTER_PORT first, as a job script does before
    ``srun python train.py``).
    """
    script = shutil.copy(l.script, l.workdir)
    env = shell(l.options.get("activate", True))
    if l.options.get("master"):
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(l.port)}
    argv = ["srun", f"--nodes={l.nnodes}", f"--ntasks-per-node={l.nproc}",
            f"--time={l.options.get('time', '00:05:00')}", *l.options.get("srun_args", ()),
            "python", Path(script).name, *l.args]
    return [Proc("srun", argv, env)]


def outside_the_job(name: str):
    """The harness's ``name`` launcher, run without the variables of the job the tests run
    in, with the configuration of its cluster: as from a login node of that cluster."""

    def build(l: Launch) -> list[Proc]:
        drop = sorted(var for var in os.environ
                      if var.startswith(JOB_VARIABLES) and var != "SLURM_CONF")
        conf = [f"SLURM_CONF={OUTER_SLURM_CONF}"] if OUTER_SLURM_CONF else ["-u", "SLURM_CONF"]
        prefix = ["env", *(arg for var in drop for arg in ("-u", var)), *conf]
        return [dataclasses.replace(p, argv=[*prefix, *p.argv]) for p in LAUNCHERS[name](l)]

    return build


# On the GPU cluster the tests run in (tests/slurm/real_cluster.py).
for _name in ("sbatch", "srun", "bash"):
    launcher(f"real-{_name}", COMMANDS.get(_name))(outside_the_job(_name))


# --- Modules ------------------------------------------------------------------------------

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


def module_tree(profile: centre.Profile, folder: Path) -> Path:
    """An Lmod module tree in ``folder`` with one module per name in the profile's
    ``modules``; each puts the tests' virtual environment first on PATH and sets
    ``GUIDE_MODULE_<name>=loaded``, so that a test can tell it was loaded."""
    tree = folder / "modulefiles"
    for name in profile.modules:
        path = tree / f"{name}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'-- generated by the tests from {profile.path.name}\n'
                        f'prepend_path("PATH", "{BIN}")\n'
                        f'setenv("{module_variable(name)}", "loaded")\n')
    return tree


def module_variable(name: str) -> str:
    return "GUIDE_MODULE_" + "".join(c if c.isalnum() else "_" for c in name)


def module_env(profile: centre.Profile, folder: Path) -> dict[str, str]:
    """The environment in which a job's ``module`` lines work: Lmod (Debian's lmod) set up
    for non-interactive shells through BASH_ENV, and the generated tree on MODULEPATH.
    {} for a profile without modules."""
    if not profile.modules:
        return {}
    if not LMOD_INIT.is_file():
        raise RuntimeError(f"{profile.path.name} loads modules, and the tests run its module "
                           f"lines with Lmod: install Debian's lmod ({LMOD_INIT} is missing)")
    return {"MODULEPATH": str(module_tree(profile, folder)), "BASH_ENV": str(LMOD_INIT)}


# --- Containers ---------------------------------------------------------------------------

#: Where the stand-in container command writes one line per program it starts.
CONTAINER_LOG = "container.log"
_STAND_IN = """#!/bin/bash
# A stand-in for the profile's container command ({name}), generated by the tests: it
# notes what it was asked to run, then runs it without a container.
for ((i = 1; i <= $#; i++)); do [[ ${{!i}} == "$CONTAINER" ]] && break; done
if ((i > $#)); then
    echo "{name} (stand-in): the image \\$CONTAINER ($CONTAINER) is not among: $*" >&2
    exit 97
fi
echo "${{SLURMD_NODENAME:-?}} ${{SLURM_PROCID:-?}} ${{SLURM_CPUS_PER_TASK:-?}}" \\
     "${{OMP_NUM_THREADS:-?}} ${{0##*/}} ${{*:1:i-1}} IMAGE ${{*:i+1}}" >> {log}
exec "${{@:i+1}}"
"""


def container_env(profile: centre.Profile, folder: Path, path: str) -> dict[str, str]:
    """The environment in which a job's container command works: a stand-in for it,
    first on the PATH, that writes to ``folder/container.log`` (:data:`CONTAINER_LOG`)
    where it ran (node, task), with how many cores and threads (``SLURM_CPUS_PER_TASK``,
    ``OMP_NUM_THREADS``), and what, and runs it on the node itself. {} for a profile without a
    container."""
    if not profile.container_exec:
        return {}
    name = profile.container_exec.split()[0]
    if "/" in name:
        raise RuntimeError(f"{profile.path.name}: the tests stand in for the container "
                           f"command by its name on the PATH, not by a path: {name}")
    bin_dir = folder / "container-bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / Path(name).name
    stand_in.write_text(_STAND_IN.format(name=name, log=shlex.quote(str(folder / CONTAINER_LOG))))
    stand_in.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{path}"}


# --- The local cluster --------------------------------------------------------------------

def unavailable_reason() -> str | None:
    """Why this machine cannot run the local cluster, or None if it can."""
    missing = [cmd for cmd in ("slurmctld", "slurmd", "sbatch", "munged")
               if shutil.which(cmd) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): "
                f"run tools/local-slurm/install as root")
    if os.geteuid() != 0:
        return "the local Slurm cluster (tools/local-slurm/start) must be started as root"
    return None


#: What the local cluster calls its GPUs when the profile names no type (a GRES type is
#: needed for a typed request such as ``--gpus-per-node=a100:4``).
LOCAL_GPU_TYPE = "a100"


def cluster_shape(profile: centre.Profile) -> dict[str, str]:
    """tools/local-slurm/start's settings for a cluster shaped like ``profile``'s first
    partition: its GPUs per node (as GRES of its type), their features, CPUs per node
    (cores x threads where the profile gives them, else its GPUs' CPUs) and memory per
    node (``mem_per_node`` where given, else its GPUs' memory); every partition name of
    the profile (the first is the default) with the limits Slurm enforces
    (:func:`partition_limits`), and debug, without limits."""
    part = profile.partition
    memory = part.mem_per_node_mb or part.gpus_per_node * part.mem_per_gpu_mb
    return {"LOCAL_SLURM_GPUS": str(part.gpus_per_node),
            "LOCAL_SLURM_GPU_TYPE": part.gpu_type or LOCAL_GPU_TYPE,
            "LOCAL_SLURM_FEATURES": ",".join(part.features),
            "LOCAL_SLURM_CPUS": str(part.cpus_per_node or part.gpus_per_node * part.cpus_per_gpu),
            "LOCAL_SLURM_MEMORY": str(int(memory)),
            # and a partition for the tests of the harness itself
            "LOCAL_SLURM_PARTITIONS": " ".join(
                ",".join([name, *partition_limits(profile, name, memory)])
                for name in dict.fromkeys([*(p.name for p in profile.partitions), "debug"]))}


def partition_limits(profile: centre.Profile, name: str, node_memory: int) -> list[str]:
    """The slurm.conf limits of partition ``name`` (``MaxNodes=1``...): those Slurm can
    enforce of the profile's ``max_nodes``, ``mem_per_node`` and ``max_cpus_per_job``.

    A job above one is refused at submission (EnforcePartLimits=ALL). The CPU cap is
    ``MaxCPUsPerNode``, the CPUs of a node that the partition's jobs may use together
    (without an accounting database, Slurm has no limit per job): measured on Slurm
    22.05, a job that asks more is refused, and two jobs within the cap still share a
    node's CPUs (OverSubscribe=FORCE:2). Where one Slurm partition has nodes of several
    GPU types (several entries of one name), a limit holds only where every entry has
    it, at the loosest value. ``DefMemPerNode`` goes with a memory limit below the
    node's memory: a job that asks for none would otherwise ask for the whole node's,
    and be refused."""
    parts = [p for p in profile.partitions if p.name == name]
    if not parts:
        return []
    found = []
    for key, values in (("MaxNodes", [p.max_nodes for p in parts]),
                        ("MaxMemPerNode", [p.mem_per_node_mb for p in parts]),
                        ("MaxCPUsPerNode", [p.max_cpus_per_job for p in parts])):
        if all(values):  # 0: no limit
            found.append(f"{key}={max(values)}")
            if key == "MaxMemPerNode" and max(values) < node_memory:
                found.append(f"DefMemPerNode={max(values)}")
    return found


def start_cluster(state_dir: Path, profile: centre.Profile | None = None) -> Path:
    """Start the two-node cluster in ``state_dir``, shaped like ``profile`` (default: the
    centre's); return its slurm.conf.

    The daemons do not carry the harness's tags: they are not a run's processes,
    and the munged they may start can outlive the session, serving another cluster.
    """
    env = {k: v for k, v in os.environ.items() if k not in (SESSION_TAG, RUN_TAG)}
    env |= cluster_shape(profile or centre.load())
    started = subprocess.run([str(LOCAL_SLURM / "start"), str(state_dir)], env=env,
                             capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        raise RuntimeError(f"tools/local-slurm/start failed:\n{started.stdout}"
                           f"{started.stderr}")
    return state_dir / "slurm.conf"


def shared_cluster(state_dir: Path) -> Path:
    """The cluster of this test session, in ``state_dir``; return its slurm.conf.

    The first process of the session that needs it starts it (under a file lock, so that
    parallel test processes share one cluster); whoever made ``state_dir`` stops it.
    """
    with open(state_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (state_dir / "started").exists():
            start_cluster(state_dir)
            (state_dir / "started").touch()
    return state_dir / "slurm.conf"


def stop_cluster(state_dir: Path) -> None:
    """Cancel every job and stop the daemons (tools/local-slurm/stop)."""
    subprocess.run([str(LOCAL_SLURM / "stop"), str(state_dir)], check=True, timeout=120)


def processes():
    """``(pid, argv, environment at its start, name)`` of every other process this user
    can read in /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        yield entry.name, argv, dict(v.split("=", 1) for v in environ if "=" in v), comm


def cluster_processes(conf: Path) -> list[str]:
    """``pid command`` of every daemon, job step or job process of the cluster using ``conf``.

    Daemons name ``conf`` on their command line; job steps (slurmstepd) and job
    processes have ``SLURM_CONF=conf`` in their environment, and jobs SLURM_JOB_ID too.
    """
    found = []
    for pid, argv, environ, comm in processes():
        uses_conf = str(conf) in argv or environ.get("SLURM_CONF") == str(conf)
        daemon = comm in ("slurmctld", "slurmd", "slurmstepd", "slurmscriptd")
        if uses_conf and (daemon or "SLURM_JOB_ID" in environ):
            found.append(f"{pid} {' '.join(argv).strip()}")
    return found


if __name__ == "__main__":
    sys.exit(main())
