"""snippets/ddp/train.py, shown on docs/ddp/code_changes.md and docs/ddp/launching.md.

Its reference runs, and what the tests read in a run, are tests/ddp/train_runs.py's,
which the other tests of docs/ddp and docs/quickstart.md share.
"""

import socket

import pytest
import torch

from harness.launch import Result, run
from harness.outputs import BARRIER_WARNING, GPU_ATOL, check_output, check_text
from harness.slurm_env import STARTED_BY
from tests.compare import assert_every_rank_holds_the_same, assert_same_state, load
from tests.ddp.train_runs import (SNIPPET, final_parameters, held_out_accuracy, losses,
                                  needs_mpirun, one_process, stderr_lines, train, two_ranks)
from tests.devices import on_each_device
from tests.slurm.started_by import assert_reads_its_launcher


@on_each_device(gpus=2, one_gpu=True)
def test_two_processes_end_where_one_process_on_the_whole_batch_ends(device):
    """On two GPUs NCCL trains like one process, within GPU_ATOL (two_ranks and one_process
    run on the GPUs in a GPU test). On one GPU the page's command at world size 1 trains
    over NCCL on cuda:0, its barriers told their GPU."""
    ranks = device.ranks(2)
    result = two_ranks() if ranks == 2 else train(launcher="torchrun", world=ranks)
    device.check_output(result)
    assert result.stdout.startswith(
        f"world size {ranks} ({device.backend}, {device.type}): "
        f"{ranks} × {32 // ranks} = 32 samples per step")
    assert f"final parameters identical on all ranks (world size {ranks})" in result.stdout
    if ranks > 1:  # one process is the reference itself
        assert_same_state(final_parameters(result), final_parameters(one_process()),
                          device.pick(1e-6, GPU_ATOL))
    if device.cuda:
        assert BARRIER_WARNING not in result.text  # it was told its GPU
    else:
        assert len(losses(result.stdout)) == 12
        assert held_out_accuracy(result.stdout) == held_out_accuracy(one_process().stdout) > 85
        for (label, loss), (label1, loss1) in zip(losses(result.stdout),
                                                  losses(one_process().stdout)):
            assert label == label1 and loss == pytest.approx(loss1, abs=1e-4)


def test_four_processes_on_two_nodes_hold_identical_parameters_equal_to_one_process():
    result = train(launcher="torchrun-static", world=4, nnodes=2, every_rank_saves=True)
    check_output(result, "two-nodes")
    assert "final parameters identical on all ranks (world size 4)" in result.stdout
    final = final_parameters(result)
    held = assert_every_rank_holds_the_same(result, 4)  # what each rank held when it ended
    assert_same_state(dict(zip(final, map(torch.from_numpy, held), strict=True)), final, atol=0)
    assert_same_state(final, final_parameters(one_process()), atol=1e-6)
    assert [label for label, _ in losses(result.stdout)] == [label for label, _ in losses(two_ranks().stdout)]
    for (_, loss), (_, loss1) in zip(losses(result.stdout), losses(one_process().stdout)):
        assert loss == pytest.approx(loss1, abs=1e-4)


@pytest.mark.parametrize("launcher, nnodes", [
    ("torchrun-c10d", 2),
    ("srun-env", 1),
    pytest.param("srun", 1, marks=pytest.mark.slurm),
    pytest.param("mpirun", 1, marks=[pytest.mark.mpi, needs_mpirun]),
])
def test_every_launcher_gives_the_same_result(launcher, nnodes):
    options = {"master": True, "srun_args": ["--kill-on-bad-exit=1"]} if launcher == "srun" else {}
    result = train(launcher=launcher, world=2, nnodes=nnodes, **options)
    assert losses(result.stdout) == losses(two_ranks().stdout)
    assert_same_state(final_parameters(result), final_parameters(two_ranks()), atol=0)


@on_each_device(gpus=2)
def test_a_stopped_run_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(tmp_path, device):
    """On two GPUs it resumes too, and ends within 1e-6 of the run that never stopped."""
    stopped = run(SNIPPET, "--batch-size", "16", "--max-steps", "40", launcher="torchrun", nproc=2,
                  workdir=tmp_path)
    device.check_output(stopped, "stopped")
    if not device.cuda:
        assert load(tmp_path / "checkpoint.pt")["step"] == 40
    resumed = run(SNIPPET, "--batch-size", "16", launcher="torchrun", nproc=2, workdir=tmp_path)
    device.check_output(resumed, "resumed")
    assert "resumed from checkpoint.pt at step 40" in resumed.stdout
    if not device.cuda:
        # the loss printed at the same steps is that of the run that never stopped
        printed = dict(losses(stopped.stdout) + losses(resumed.stdout))
        uninterrupted = dict(losses(two_ranks().stdout))
        assert {k: v for k, v in printed.items() if "step" in k} == {
            k: v for k, v in uninterrupted.items() if "step" in k}
    # and so are the final parameters: bit for bit on the CPU, within 1e-6 on GPUs
    assert_same_state(final_parameters(resumed), final_parameters(two_ranks()),
                      atol=device.pick(0, 1e-6))


def one_line_error(result: Result, variant: str) -> str:
    """The run failed by itself, within its time limit (60 s in these tests), with one
    line on stderr and no traceback; show that line on the page."""
    assert not result.timed_out and result.returncode != 0
    lines = stderr_lines(result, r"^train\.py: ")
    assert len(lines) == 1, result.report()
    assert "Traceback" not in result.text.split(lines[0])[-1], result.report()
    check_text(lines[0] + "\n", SNIPPET, variant, command=result.command, port=result.port)
    return lines[0]


@pytest.mark.parametrize("started_by", STARTED_BY)
def test_it_reads_the_rank_of_whatever_started_it_inside_a_slurm_job(started_by, monkeypatch):
    """Open MPI's variables before Slurm's, which the processes mpirun starts inherit from
    the job script or from a job step of mpirun's; Slurm's only in a task of srun, never
    in the job script itself (harness/slurm_env.py)."""
    assert_reads_its_launcher(SNIPPET, started_by, monkeypatch)


def test_rank_set_by_hand_without_the_others_stops_with_one_line():
    result = run(SNIPPET, check=False, timeout=60, env={"RANK": "0", "WORLD_SIZE": "1"})
    assert result.outputs[0].returncode == 1
    assert "Traceback" not in result.text
    assert "train.py: RANK is set but not LOCAL_RANK" in result.text


def test_without_a_launcher_it_stops_with_one_line():
    result = run(SNIPPET, check=False, timeout=60)
    assert result.outputs[0].returncode == 1
    assert "Traceback" not in result.text
    assert "torchrun --standalone --nproc_per_node=1 train.py" in one_line_error(result, "no-launcher")


def test_an_unknown_master_addr_stops_every_process_at_once():
    result = run(SNIPPET, launcher="srun-env", nproc=2, master_addr="node17.invalid", check=False,
                 timeout=60)
    assert [o.returncode for o in result.outputs] == [1, 1]  # each ended by itself
    assert "MASTER_ADDR=node17.invalid is not a host name" in one_line_error(result, "unknown-host")


def test_a_process_that_never_comes_fails_the_others_after_the_timeout():
    result = run(SNIPPET, "--timeout", "5", launcher="srun-env", nproc=2, ranks=[0], check=False,
                 timeout=60)
    assert [o.returncode for o in result.outputs] == [1]
    assert result.seconds > 5
    line = one_line_error(result, "timeout")
    assert "1/2 clients joined" in line


@pytest.mark.mpi
@needs_mpirun
def test_a_port_in_use_fails_rank_0_at_once_and_mpirun_stops_the_others(monkeypatch):
    with socket.socket() as busy:  # another program listening on the port: it accepts, never answers
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setattr("harness.launch.free_port", lambda: busy.getsockname()[1])
        result = run(SNIPPET, launcher="mpirun", nproc=2, check=False, timeout=60)
    assert "EADDRINUSE" in one_line_error(result, "port-in-use")
