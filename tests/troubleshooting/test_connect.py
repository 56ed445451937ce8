"""snippets/troubleshooting/connect.py, shown on docs/troubleshooting/startup.md."""

import socket

import pytest

from harness.launch import run, shared
from harness.outputs import check_output
from tests.devices import on_each_device
from tests.troubleshooting.common import check_errors, error_lines, run_together

SNIPPET = "troubleshooting/connect.py"


@pytest.fixture(scope="module")
@shared
def runs():
    with socket.socket() as busy:  # another program listening on the port
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        common = dict(script=SNIPPET, launcher="torchrun-static", nnodes=2, nproc=1,
                      check=False)
        return run_together(
            right=dict(common, check=True),
            busy_port=dict(common, nnodes=1, master_port=busy.getsockname()[1], timeout=60),
            # an unknown host: torchrun retries until its own timeout, minutes later
            unknown_host=dict(common, nnodes=1, master_addr="node17.invalid", timeout=15),
        )


def test_every_process_answers(runs):
    result = runs["right"]
    check_output(result)
    assert result.stdout.startswith("2 of 2 processes answered")


def test_a_port_in_use_stops_the_launcher_at_once(runs):
    result = runs["busy_port"]
    assert not result.timed_out and result.returncode != 0, result.report()
    lines = error_lines(result, r"DistNetworkError: .*EADDRINUSE")
    check_errors(result, "port-in-use", lines[:1])


def test_an_unknown_host_name_keeps_the_launcher_retrying(runs):
    result = runs["unknown_host"]
    assert result.timed_out, result.report()  # still trying when it was stopped
    assert not result.ranks_started  # no process ever started
    lines = error_lines(result, r"node17\.invalid.*Name or service not known")
    assert len(lines) >= 1, result.report()
    check_errors(result, "unknown-host", lines[:1])


@on_each_device(gpus=2, one_gpu=True)
def test_on_one_node_every_process_answers_over_its_backend(device):
    """torchrun on one node; on GPUs each process on its own GPU, over NCCL (on one GPU,
    at world size 1)."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, timeout=device.pick(60, 180),
                 env=device.env())
    device.assert_ran(ranks, result=result)
    assert result.stdout == (f"{ranks} of {ranks} processes answered, on 1 host(s), "
                             f"using {device.backend}\n")
