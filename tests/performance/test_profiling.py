"""snippets/performance/profiling.py, shown on docs/performance/profiling.md.

Run once with the debug variables the page suggests, so that their effect is checked too.
"""

import json
import re

import pytest

from harness.launch import run
from harness.outputs import check_output

SNIPPET = "performance/profiling.py"
RANKS = 2
DEBUG = {"TORCH_DISTRIBUTED_DEBUG": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"}


def rows(stdout):
    """{rank: all-reduce count} from the printed table."""
    return {
        int(r): int(calls)
        for r, calls in re.findall(
            r"^ +(\d+)(?: +[\d.]+ ms){3} +(\d+) +[\d.]+ ms +\d+%$", stdout, re.M
        )
    }


def trace_events(path, prefix, category=None):
    events = json.loads(path.read_text())["traceEvents"]
    return [
        e
        for e in events
        if e.get("name", "").startswith(prefix) and category in (None, e.get("cat"))
    ]


def check_run(result, comm_prefix):
    calls = rows(result.stdout)
    assert sorted(calls) == list(range(RANKS))
    for rank, count in calls.items():
        trace = result.workdir / f"trace_rank{rank}.json"  # one trace per rank, named by rank
        assert len(trace_events(trace, "forward", "user_annotation")) == 3  # the 3 recorded steps
        assert len(trace_events(trace, comm_prefix)) == count > 0  # the all-reduces it counted
        assert count % 3 == 0  # the same number of buckets in every step


def test_one_trace_per_rank_and_ddp_settings_logged(tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=RANKS, workdir=tmp_path, env=DEBUG)
    check_output(result)
    check_run(result, "gloo:all_reduce")
    assert "[c10d] The debug level is set to INFO." in result.text
    for rank in range(RANKS):
        assert f"[Rank {rank}]: DDP Initialized with:" in result.text
    assert "bucket_cap_bytes: 26214400" in result.text


@pytest.mark.multigpu(2)
def test_on_gpus_nccl_kernels_are_traced(tmp_path):
    result = run(
        SNIPPET, launcher="torchrun", nproc=RANKS, workdir=tmp_path, env={"NCCL_DEBUG": "INFO"}
    )
    check_run(result, ("ncclDevKernel", "ncclKernel"))
    assert "NCCL INFO" in result.text
