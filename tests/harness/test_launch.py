"""The harness catches what a test must never let through."""

import dataclasses
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from harness.launch import (BIN, EXIT_ABORT_MESSAGE, LAUNCHERS, ROOT, SESSION_ID, SESSION_TAG,
                            Launch, command_of, run, tagged_pids, without_gloo_notes)

SCRIPTS = Path(__file__).parent / "scripts"


def test_a_hang_is_killed_at_the_timeout_with_everything_it_started(tmp_path):
    before = set(tagged_pids(SESSION_TAG, SESSION_ID))  # the session's own, such as a browser
    started = time.monotonic()
    result = run(SCRIPTS / "hangs.py", timeout=5, check=False, workdir=tmp_path)
    assert result.timed_out and not result.ok
    # Killed at the timeout, not when its 600 s sleep ends: the margin holds on a machine
    # so busy that starting and killing the processes take tens of seconds.
    assert time.monotonic() - started < 60
    assert "now hanging" in result.stdout
    survivors = set(tagged_pids(SESSION_TAG, SESSION_ID)) - before
    assert not survivors, "the child in its own session survived"


def test_a_failing_rank_stops_the_run_and_its_traceback_is_reported():
    with pytest.raises(AssertionError) as failure:
        run(SCRIPTS / "rank1_fails.py", launcher="env", nproc=2, timeout=60)
    message = str(failure.value)
    assert "the run failed" in message
    assert "rank1 stderr" in message and "rank 1 gives up here" in message
    assert "rank 0 waits for rank 1 forever" in message


def test_gloo_s_crash_at_exit_is_named_in_the_failure(pytestconfig):
    with pytest.raises(AssertionError) as failure:
        run(SCRIPTS / "aborts_at_exit.py", launcher="env", nproc=1, world_size=0)
    assert EXIT_ABORT_MESSAGE in str(failure.value)
    assert not pytestconfig.pluginmanager.hasplugin("rerunfailures")  # never run again
    for script, args, nproc in (("aborts_at_exit.py", ["--plain"], 1), ("rank1_fails.py", [], 2)):
        with pytest.raises(AssertionError) as failure:
            run(SCRIPTS / script, *args, launcher="env", nproc=nproc, world_size=0, timeout=60)
        assert "the run failed" in str(failure.value)
        assert EXIT_ABORT_MESSAGE not in str(failure.value)


def test_a_run_that_prints_nothing_fails():
    with pytest.raises(AssertionError, match="printed nothing"):
        run(SCRIPTS / "silent.py", launcher="env", nproc=2)


def test_ranks_that_never_join_a_process_group_fail_the_run():
    with pytest.raises(AssertionError, match=r"ranks \[0, 1\] never joined"):
        run(SCRIPTS / "no_process_group.py", launcher="env", nproc=2)


def test_a_run_finds_the_programs_of_the_venv_first_as_a_job_does():
    """As from a shell where the venv is active, like the Slurm jobs: DeepSpeed then
    compiles its CPU operator with the same ninja in both, and only once (each ninja
    rebuilds what the other one built)."""
    programs = ("ninja", "python", "torchrun")
    result = run(SCRIPTS / "which.py", *programs, world_size=0)
    assert result.stdout == "".join(f"{name} {BIN / name}\n" for name in programs)


def test_no_run_is_unbuffered(monkeypatch):
    """A reader's Python buffers what it prints to a file: so do the runs, even when the
    shell the tests run from has PYTHONUNBUFFERED=1: a line that must survive a kill is
    flushed by the snippet itself, as a reader's would have to be."""
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    result = run(SCRIPTS / "buffering.py", world_size=0)
    assert result.stdout == "PYTHONUNBUFFERED unset\nstdout buffered\nOMP_NUM_THREADS 1\n"


@pytest.mark.slurm
def test_no_job_is_unbuffered(monkeypatch):
    """Nor do the jobs, which inherit the environment sbatch was run in."""
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    result = run(SCRIPTS / "buffering.sbatch", launcher="sbatch", world_size=0, timeout=60)
    assert result.stdout == ("job script: PYTHONUNBUFFERED unset\n"
                             "srun task: PYTHONUNBUFFERED unset\n")


def test_a_snippet_trains_without_one_thread_per_process():
    """The runs get OMP_NUM_THREADS=1 (harness/launch.py), which a reader's ``python
    train_spawn.py`` does not have: without it, the spawned ranks train too (a thread per
    core each: only slower where they share the cores)."""
    from tests.compare import load
    from tests.ddp.train_runs import losses
    unset = run(SCRIPTS / "buffering.py", world_size=0, env={"OMP_NUM_THREADS": None})
    assert "OMP_NUM_THREADS unset\n" in unset.stdout
    result = run("ddp/train_spawn.py", "--nprocs", "2", "--batch-size", "16", "--epochs", "1",
                 world_size=2, env={"OMP_NUM_THREADS": None}, timeout=300)
    printed = [loss for _, loss in losses(result.stdout)]
    assert len(printed) == 4 and printed[-1] < printed[0], result.stdout  # 3 steps' lines, the epoch's
    assert load(result.workdir / "checkpoint.pt")["step"] == 32


#: A job script that sets up its environment as the guide's do, and says which Python ran.
WHICH_PYTHON = """#!/bin/bash
#>cluster gpus=0 tasks=1
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:02:00
#<cluster

#>environment
source .venv/bin/activate
#<environment
python -c 'import sys, torch; print("python", sys.executable)'
"""


@pytest.mark.slurm
@pytest.mark.parametrize("modules", [False, True], ids=["venv", "profile-modules"])
def test_a_job_sets_up_its_own_environment(tmp_path, modules):
    """Every job is submitted from a shell where no virtual environment is active, from a
    folder where the tests' is linked as .venv: the job's own line activates it, or a
    profile's module lines in its place load a module (a generated one that puts the
    tests' environment on the PATH). Without either, python would be one without torch."""
    from harness import profile as centre  # the profiles are Slurm's part of the harness
    from harness.slurm import module_variable
    profile = centre.load()
    if modules:
        profile = dataclasses.replace(profile, setup=("module purge", "module load guide-env"),
                                      modules=("guide-env",))
    script = tmp_path / "which_python.sbatch"
    script.write_text(centre.render(WHICH_PYTHON, profile))
    assert ("source .venv" in script.read_text()) != modules
    script.write_text(script.read_text() + f'echo "module: ${{{module_variable("guide-env")}:-none}}"\n')
    result = run(script, launcher="sbatch", profile=profile, world_size=0, timeout=120,
                 workdir=tmp_path / "job")
    python = BIN.resolve() / "python" if not modules else BIN / "python"
    assert result.stdout == f"python {python}\nmodule: {'loaded' if modules else 'none'}\n"


@pytest.mark.parametrize("launcher, nproc, nnodes", [
    ("torchrun", 2, 1), ("torchrun-static", 1, 2), ("torchrun-c10d", 1, 2), ("env", 2, 1)])
def test_every_launcher_starts_every_rank(launcher, nproc, nnodes):
    result = run(SCRIPTS / "silent.py", launcher=launcher, nproc=nproc, nnodes=nnodes, check=False)
    assert result.ok, result.report()
    assert result.ranks_started == {0, 1}


@pytest.mark.parametrize("launcher, options, command", [
    ("python", {}, ["python demo.py --epochs 2"]),
    ("torchrun", {}, ["torchrun --standalone --nproc_per_node=2 demo.py --epochs 2"]),
    ("torchrun-static", {}, [
        f"torchrun --nnodes=2 --node_rank={i} --nproc_per_node=2 --master_addr=127.0.0.1 "
        f"--master_port=29500 demo.py --epochs 2" for i in (0, 1)]),
    ("torchrun+restarts", {"max_restarts": 3}, [
        "torchrun --max-restarts=3 --standalone --nproc_per_node=2 demo.py --epochs 2"]),
    ("env", {}, [f"RANK={r} WORLD_SIZE=4 LOCAL_RANK={r % 2} LOCAL_WORLD_SIZE=2 "
                 f"MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python demo.py --epochs 2"
                 for r in range(4)]),
    ("mpirun", {}, ["mpirun -np 4 -x MASTER_ADDR=127.0.0.1 "
                    "-x MASTER_PORT=29500 python demo.py --epochs 2"]),
    ("mpirun", {"master": False}, ["mpirun -np 4 python demo.py --epochs 2"]),
    ("srun-env", {}, ["MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 srun --ntasks=4 python demo.py "
                      "--epochs 2"]),
    ("deepspeed", {}, ["deepspeed --num_gpus=2 --master_port=29500 demo.py --epochs 2"]),
    ("tf-workers", {}, [
        f"""TF_CONFIG='{{"cluster": {{"worker": ["127.0.0.1:29500", "127.0.0.1:29501"]}}, """
        f""""task": {{"type": "worker", "index": {i}}}}}' python demo.py --epochs 2"""
        for i in (0, 1)]),
    ("started-by", {"started_by": "srun"}, [
        "SLURM_JOB_ID=3137 SLURM_NODEID=0 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=1 "
        "SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python demo.py --epochs 2"]),
    ("sbatch", {"sbatch_args": ["--nodes=2"]}, ["sbatch --nodes=2 demo.py --epochs 2"]),
])
def test_the_readers_command_is_what_the_launcher_started(tmp_path, launcher, options,
                                                            command):
    """Programs and files by their names, the variables a launcher sets in front, and the
    run's own port shown as 29500: what a reader types to start the same processes."""
    script = tmp_path / "demo.py"
    script.write_text("print('hello')\n")
    (tmp_path / "run").mkdir()
    launch = Launch(script, ["--epochs", "2"], 2, 2 if launcher != "torchrun" else 1, 41234,
                    tmp_path / "run", options)
    assert command_of(launch, LAUNCHERS[launcher](launch), launcher) == command


def test_the_readers_command_shows_the_readers_variables_and_not_the_tests_wrapper(tmp_path):
    """A variable the test gives the run that the reader would set (PyTorch's, NCCL's, which
    GPUs) comes first; the harness's own do not show, nor does the tests' wrapper."""
    wrapper = tmp_path / "every_rank_saves.py"
    launch = Launch(wrapper, ["demo.py"], 2, 1, 41234, tmp_path, {},
                    {"TORCH_DISTRIBUTED_DEBUG": "INFO", "PYTHONPATH": "/x", "NCCL_DEBUG": "WARN"})
    assert command_of(launch, LAUNCHERS["torchrun"](launch), "torchrun") == [
        "TORCH_DISTRIBUTED_DEBUG=INFO NCCL_DEBUG=WARN torchrun --standalone --nproc_per_node=2 "
        "demo.py"]


def test_a_run_keeps_its_readers_command():
    result = run(SCRIPTS / "silent.py", launcher="env", nproc=2, check=False)
    assert result.ok and [line.split(" python ")[1] for line in result.command] == ["silent.py"] * 2


NOTE = "[Gloo] Rank {} is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"


@pytest.mark.parametrize("printed", [
    f"world size 2\n{NOTE.format(0)}\n{NOTE.format(1)}\nloss 0.5\n",
    f"world size 2\n[default0]:{NOTE.format(0)}\n0: {NOTE.format(1)}\nloss 0.5\n",
    # two processes on one stdout: the notes' pieces interleave, numbers left alone
    "world size 2\n[Gloo] Rank [Gloo] Rank 01 is connected to is connected to 11 peer ranks. "
    "peer ranks. Expected number of connected peer ranks is : Expected number of connected "
    "peer ranks is : 1\n1\nloss 0.5\n",
    f"{NOTE.format(0)}{NOTE.format(1)}\n\nworld size 2\nloss 0.5\n",
])
def test_gloo_notes_of_some_releases_are_not_part_of_the_output(printed):
    assert without_gloo_notes(printed) == "world size 2\nloss 0.5\n"


def test_output_without_gloo_notes_is_left_as_it_is():
    printed = "rank 0 is connected to rank 1\n7\n"
    assert without_gloo_notes(printed) == printed


def test_torchrun_runs_through_the_python_where_no_torchrun_sits_beside_it(tmp_path):
    """A centre's Python (a container's, say) need not have the torchrun script beside it:
    the harness then starts torch.distributed.run with that Python, and the run works."""
    site = sysconfig.get_paths()["purelib"]  # this environment's packages, torch among them
    base = subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    script = tmp_path / "ranks.py"
    script.write_text("import time\nimport torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "print('rank', dist.get_rank(), 'of', dist.get_world_size())\n"
                      "dist.destroy_process_group()\ntime.sleep(0.1)\n")
    code = ("import sys; from harness.launch import TORCHRUN, run; print(TORCHRUN[1:]); "
            f"print(run({str(script)!r}, launcher='torchrun', nproc=2).stdout)")
    done = subprocess.run([base, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("['-m', 'torch.distributed.run']\n"), done.stdout
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 of 2", "rank 1 of 2"]
