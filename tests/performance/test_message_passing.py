"""snippets/performance/message_passing.py, shown on docs/performance/message_passing.md.

Every table the snippet prints must show what each call is defined to do, for 4 ranks.
"""

import pytest

from harness.launch import run
from harness.outputs import check_output

SNIPPET = "performance/message_passing.py"
N = 4


def tables(stdout):
    """{title up to its first ':' or ' (': [(before, after) per rank]} from the printout."""
    found, title = {}, None
    for line in stdout.splitlines():
        if line.startswith("  rank "):
            before, after = line[len("  rank 0  ") :].split("  ", 1)
            found[title].append((before.strip(), after.strip()))
        elif line and not line.startswith(" ") and not line.startswith(f"{N} processes"):
            title = line.split(":")[0]
            found[title] = []
    return found


def vec(rank):
    return str([float(10 * rank + i) for i in range(N)])


def expected():
    ones = [str([r + 1.0]) for r in range(N)]
    total = str([float(sum(range(1, N + 1)))])
    everyone = str([float(r) for r in range(1, N + 1)])
    return {
        "send / recv": [
            ("[0.0]", "[0.0]"),
            ("[1.0]", "[42.0]"),
            ("[2.0]", "[2.0]"),
            ("[3.0]", "[3.0]"),
        ],
        "isend / irecv": [(str([10.0 * r]), str([10.0 * ((r - 1) % N)])) for r in range(N)],
        "batch_isend_irecv": [(str([10.0 * r]), str([10.0 * ((r - 1) % N)])) for r in range(N)],
        "broadcast(src=0)": [(ones[r], "[1.0]") for r in range(N)],
        "reduce(dst=0, SUM)": [(ones[0], total)] + [(ones[r], "(undefined)") for r in range(1, N)],
        "all_reduce(SUM)": [(ones[r], total) for r in range(N)],
        "all_reduce(MAX)": [(ones[r], str([float(N)])) for r in range(N)],
        "gather(dst=0)": [(ones[0], everyone)] + [(ones[r], "-") for r in range(1, N)],
        "all_gather": [(ones[r], everyone) for r in range(N)],
        "scatter(src=0)": [(vec(0), "[0.0]")] + [("-", str([float(r)])) for r in range(1, N)],
        "reduce_scatter(SUM)": [
            (vec(r), str([float(sum(10 * q + r for q in range(N)))])) for r in range(N)
        ],
        "all_to_all": [(vec(r), str([float(10 * q + r) for q in range(N)])) for r in range(N)],
        "all_reduce in groups of 2 (new_subgroups)": [
            (ones[r], str([float((r - r % 2 + 1) + (r - r % 2 + 2))])) for r in range(N)
        ],
        "all_reduce in the group of even ranks (new_group)": [
            (ones[r], "[4.0]" if r % 2 == 0 else "(not a member)") for r in range(N)
        ],
    }


def check_run(stdout):
    assert tables(stdout) == expected()


def test_every_call_does_what_its_table_says():
    result = run(SNIPPET, launcher="torchrun", nproc=N)
    check_output(result)
    assert result.stdout.startswith(f"{N} processes, backend gloo")
    check_run(result.stdout)


@pytest.mark.multigpu(4)
def test_on_gpus_with_nccl():
    result = run(SNIPPET, launcher="torchrun", nproc=N)
    assert result.stdout.startswith(f"{N} processes, backend nccl")
    check_run(result.stdout)
