"""snippets/performance/message_passing.py, shown on docs/performance/message_passing.md.

Every table the snippet prints must show what each call is defined to do, for 2 and for
4 ranks (the page says any even number works; it shows the tables of 4).
"""

import pytest
import torch

from harness.launch import run, snippet_code
from harness.outputs import BARRIER_WARNING
from tests.devices import CPU, Device
from tests.performance.device_checks import check_barrier_names_the_gpu

SNIPPET = "performance/message_passing.py"
SHOWN = 4  # the number of ranks whose tables the page shows


def tables(stdout):
    """{title up to its first ':' or ' (': [(before, after) per rank]} from the printout."""
    found, title = {}, None
    for line in stdout.splitlines():
        if line.startswith("  rank "):
            before, after = line[len("  rank 0  ") :].split("  ", 1)
            found[title].append((before.strip(), after.strip()))
        elif line and not line.startswith(" ") and " processes, backend " not in line:
            title = line.split(":")[0]
            found[title] = []
    return found


def expected(n):
    def vec(rank):
        return str([float(10 * rank + i) for i in range(n)])

    ones = [str([r + 1.0]) for r in range(n)]
    total = str([float(sum(range(1, n + 1)))])
    everyone = str([float(r) for r in range(1, n + 1)])
    evens = str([float(sum(r + 1 for r in range(0, n, 2)))])
    return {
        "send / recv": [("[0.0]", "[0.0]"), ("[1.0]", "[42.0]")]
        + [(str([float(r)]), str([float(r)])) for r in range(2, n)],
        "isend / irecv": [(str([10.0 * r]), str([10.0 * ((r - 1) % n)])) for r in range(n)],
        "batch_isend_irecv": [(str([10.0 * r]), str([10.0 * ((r - 1) % n)])) for r in range(n)],
        "broadcast(src=0)": [(ones[r], "[1.0]") for r in range(n)],
        "reduce(dst=0, SUM)": [(ones[0], total)] + [(ones[r], "(undefined)") for r in range(1, n)],
        "all_reduce(SUM)": [(ones[r], total) for r in range(n)],
        "all_reduce(MAX)": [(ones[r], str([float(n)])) for r in range(n)],
        "gather(dst=0)": [(ones[0], everyone)] + [(ones[r], "-") for r in range(1, n)],
        "all_gather": [(ones[r], everyone) for r in range(n)],
        "scatter(src=0)": [(vec(0), "[0.0]")] + [("-", str([float(r)])) for r in range(1, n)],
        "reduce_scatter(SUM)": [
            (vec(r), str([float(sum(10 * q + r for q in range(n)))])) for r in range(n)
        ],
        "all_to_all": [(vec(r), str([float(10 * q + r) for q in range(n)])) for r in range(n)],
        "all_reduce in groups of 2 (new_subgroups)": [
            (ones[r], str([float((r - r % 2 + 1) + (r - r % 2 + 2))])) for r in range(n)
        ],
        "all_reduce in the group of even ranks (new_group)": [
            (ones[r], evens if r % 2 == 0 else "(not a member)") for r in range(n)
        ],
    }


def check_run(result, n, backend):
    assert result.stdout.startswith(f"{n} processes, backend {backend}")
    assert tables(result.stdout) == expected(n)


#: tests.devices.on_each_device for each number of processes, with as many GPUs: on the
#: CPU, and on n GPUs marked multigpu(n).
ON_EACH_DEVICE = [pytest.param(n, device, id=f"{n}-{device.type}",
                               marks=[pytest.mark.multigpu(n)] if device.cuda else [])
                  for n in (2, SHOWN) for device in (CPU, Device(n))]


@pytest.mark.parametrize("n, device", ON_EACH_DEVICE)
def test_every_call_does_what_its_table_says(n, device):
    """With NCCL on 2 GPUs, each rank's left and right neighbour is the same rank: separate
    isend and irecv calls to one peer can hang under NCCL unless their order is right."""
    result = run(SNIPPET, launcher="torchrun", nproc=n)
    if n == SHOWN:
        device.check_output(result)
    check_run(result, n, device.backend)
    assert BARRIER_WARNING not in result.text


def test_an_odd_number_of_processes_stops_at_once():
    """new_subgroups(group_size=2) needs a world size divisible by 2: the script says so
    before it prints any table, rather than failing in its last part."""
    result = run(SNIPPET, launcher="torchrun", nproc=3, world_size=0, check=False)
    assert result.returncode != 0
    assert result.stdout == ""
    assert "message_passing.py needs an even number of processes" in result.text


def separate_p2p_calls(rank, world, monkeypatch):
    """The sends and receives point_to_point() makes on ``rank``, in order, as
    ("send" or "recv", peer); batch_isend_irecv's are left out (NCCL groups them)."""
    calls = []

    class Request:
        def wait(self):
            pass

    def record(kind):
        def call(tensor, dst=None, src=None):
            calls.append((kind, dst if kind == "send" else src))
            return Request()
        return call

    def gather(rows, obj):
        rows[:] = [obj] * world

    for name, kind in (("send", "send"), ("isend", "send"), ("recv", "recv"), ("irecv", "recv")):
        monkeypatch.setattr(torch.distributed, name, record(kind))
    monkeypatch.setattr(torch.distributed, "P2POp", lambda *args: args)
    monkeypatch.setattr(torch.distributed, "batch_isend_irecv", lambda ops: [])
    monkeypatch.setattr(torch.distributed, "all_gather_object", gather)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: world)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: rank)
    snippet_code(SNIPPET)["point_to_point"](rank, world, torch.device("cpu"))
    return calls


def runs_to_the_end(queues):
    """Whether every queue empties when each rank runs its calls in the order it made
    them and a send completes only together with the matching receive. NCCL runs
    separate calls between the same two ranks so (and all of a rank's calls, when they
    share one communicator); this model is the stricter of the two."""
    queues = {rank: list(calls) for rank, calls in queues.items()}
    progress = True
    while progress:
        progress = False
        for rank, calls in queues.items():
            if calls and calls[0][0] == "send":
                peer = calls[0][1]
                if queues[peer] and queues[peer][0] == ("recv", rank):
                    calls.pop(0)
                    queues[peer].pop(0)
                    progress = True
    return not any(queues.values())


def test_the_model_of_nccl_finds_the_hang_of_sending_first():
    assert not runs_to_the_end({0: [("send", 1), ("recv", 1)], 1: [("send", 0), ("recv", 0)]})
    assert runs_to_the_end({0: [("send", 1), ("recv", 1)], 1: [("recv", 0), ("send", 0)]})


@pytest.mark.parametrize("world", [2, 3, 4])
def test_separate_sends_and_receives_cannot_wait_on_each_other(world, monkeypatch):
    queues = {}
    for rank in range(world):
        queues[rank] = separate_p2p_calls(rank, world, monkeypatch)
    assert queues[0][:2] == [("send", 1), ("send", 1)]  # send(), then isend()
    assert runs_to_the_end(queues), queues


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)
