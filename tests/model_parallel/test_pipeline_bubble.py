"""snippets/model_parallel/pipeline_bubble.py, shown on docs/model_parallel/pipeline_schedules.md."""

import re
import time
import types

import pytest
import torch

from harness.launch import run, shared, snippet_code
from harness.outputs import BARRIER_WARNING, check_output
from tests.devices import CPU, on_each_device
from tests.performance.device_checks import check_barrier_names_the_gpu

SNIPPET = "model_parallel/pipeline_bubble.py"
STAGES = 2
ROW = re.compile(r"^(GPipe|1F1B) +(\d+) +[\d.]+ s +([\d.]+)% +([\d.]+)% +(\d+)$", re.M)
#: How far the measured idle share may fall below (p-1)/(m+p-1): a sleep lasts at
#: least as long as asked, so only the clock's grain.
BELOW = 0.02


def formula(m):
    return (STAGES - 1) / (m + STAGES - 1)


def no_overlap():
    """The idle share if the stages never worked at the same time: (p-1)/p."""
    return (STAGES - 1) / STAGES


def ceiling(m):
    """Sending the activations and the barriers around each step add idle time, and
    on a busy machine (the suite runs other multi-process tests beside this one) as
    much as 14 points were seen. The measured share must stay closer to the formula
    than to stages that never overlap: that is what a pipeline is."""
    return (formula(m) + no_overlap()) / 2


#: Runs the idle-time test may take. A busy machine only ever adds idle time (a stage
#: that waits for a core looks idle), so the least idle of a few runs is the schedule's
#: own; stages that never overlap stay above the ceiling in every run.
RUNS = 3


def bubble_run(device):
    run_ = run(SNIPPET, launcher="torchrun", nproc=STAGES, env=device.env("bubble"))
    device.assert_ran(STAGES, "bubble", run_)
    return run_


result = shared(bubble_run)


def parse_table(stdout):
    """{schedule: [(micro-batches, measured idle, formula, micro-batches held by rank 0)]}"""
    rows = {}
    for name, m, measured, expected, held in ROW.findall(stdout):
        rows.setdefault(name, []).append((int(m), float(measured) / 100, float(expected) / 100, int(held)))
    assert list(rows) == ["GPipe", "1F1B"] and all(len(r) == 3 for r in rows.values())
    return rows


def table(device):
    return parse_table(result(device).stdout)


def least_idle(tables):
    """One table: each row as the run that measured the least idle time had it."""
    return {name: [min(rows, key=lambda row: row[1]) for rows in zip(*(t[name] for t in tables))]
            for name in tables[0]}


def check_idle_follows_the_formula(table):
    for name, rows in table.items():
        measured = [idle for _, idle, _, _ in rows]
        assert measured == sorted(measured, reverse=True), (name, measured)
        for m, idle, expected, _ in rows:
            assert expected == pytest.approx(formula(m), abs=0.0005)
            assert formula(m) - BELOW <= idle < ceiling(m), (name, m, idle)


def diagrams(stdout):
    """{schedule: [the cells of each rank's row]} from the drawings after the table."""
    drawn, current = {}, None
    for line in stdout.splitlines():
        if line.endswith("micro-batches (F3 = forward of micro-batch 3; .. = idle):"):
            current = drawn.setdefault(line.split(",")[0], [])
        elif line.startswith("rank ") and current is not None:
            current.append(line.split("| ")[1].split())
    return drawn


def test_output_matches_the_page():
    check_output(result(CPU))


@on_each_device(gpus=STAGES)
def test_measured_idle_time_falls_with_more_micro_batches_as_the_formula_says(device):
    """With NCCL the stages wait for their inputs too, so the same tolerance holds. On a
    busy machine, up to RUNS runs."""
    tables = [table(device)]
    while True:
        try:
            check_idle_follows_the_formula(least_idle(tables))
            break
        except AssertionError:
            if len(tables) == RUNS:
                raise
            tables.append(parse_table(bubble_run(device).stdout))
    if device.cuda:
        assert BARRIER_WARNING not in result(device).text


def test_the_check_fails_for_stages_that_take_turns():
    """Stages that wait for each other's whole step leave (p-1)/p idle, whatever m."""
    table = {name: [(m, no_overlap(), formula(m), m) for m in (2, 4, 8)] for name in ("GPipe", "1F1B")}
    with pytest.raises(AssertionError):
        check_idle_follows_the_formula(least_idle([table, table, table]))
    pipelined = {name: [(m, formula(m), formula(m), m) for m in (2, 4, 8)] for name in table}
    check_idle_follows_the_formula(least_idle([table, pipelined]))  # one quiet run is enough


def test_1f1b_holds_fewer_micro_batches_than_gpipe():
    table_ = table(CPU)
    assert [(m, held) for m, *_, held in table_["GPipe"]] == [(m, m) for m, *_ in table_["GPipe"]]
    assert [held for *_, held in table_["1F1B"]] == [STAGES] * 3


def test_drawings_are_what_the_schedules_promise():
    drawn = diagrams(result(CPU).stdout)
    assert list(drawn) == ["GPipe", "1F1B"]
    m = 4
    for name, rows in drawn.items():
        assert len(rows) == STAGES
        ticks = len(rows[0])
        assert all(len(row) == ticks for row in rows)
        # Each micro-batch: 1 tick forward and 2 backward on every rank, nothing else.
        assert ticks == (m + STAGES - 1) * 3
        idle = sum(row.count("..") for row in rows) / (STAGES * ticks)
        assert idle == pytest.approx(formula(m))
        for row in rows:
            assert sorted(set(row) - {".."}) == sorted({f"{k}{i}" for k in "FB" for i in range(m)})
    assert drawn["GPipe"][0][:m] == ["F0", "F1", "F2", "F3"]  # all forwards first
    assert drawn["1F1B"][1][:4] == ["..", "F0", "B0", "B0"]   # the last stage turns round at once


def test_each_stage_waits_for_its_input_before_it_works():
    """Forward and backward start only after wait_for_input has returned: under NCCL,
    wait() on a receive does not block the process, and the stage would never look idle."""
    code = snippet_code(SNIPPET)["Work"].forward.__globals__  # what its functions see
    clock = []
    code["wait_for_input"] = lambda t: clock.append(("wait", time.perf_counter()))
    code["FORWARD_SECONDS"] = 0.001
    x = torch.ones(2, 3, requires_grad=True)
    code["Work"].apply(x).sum().backward()
    assert [kind for kind, _ in clock] == ["wait", "wait"]
    (f, f_start, _), (b, b_start, _) = code["events"]
    assert (f, b) == ("F", "B")
    assert clock[0][1] <= f_start and clock[1][1] <= b_start
    assert torch.equal(x.grad, torch.ones(2, 3))


def test_waiting_for_input_synchronises_the_gpu_stream_and_leaves_cpu_tensors_alone(monkeypatch):
    code = snippet_code(SNIPPET)
    synchronised = []
    stream = types.SimpleNamespace(synchronize=lambda: synchronised.append(True))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: synchronised.append(device) or stream)
    code["wait_for_input"](types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1)))
    assert synchronised == [torch.device("cuda", 1), True]
    code["wait_for_input"](torch.zeros(1))  # a CPU tensor: nothing to wait for
    assert len(synchronised) == 2


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)
