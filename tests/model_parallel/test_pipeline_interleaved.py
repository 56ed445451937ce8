"""snippets/model_parallel/pipeline_interleaved.py, shown on docs/model_parallel/pipeline_interleaved.md."""

import re
import time
import types

import pytest
import torch

from harness.launch import run, shared, snippet_code
from harness.outputs import BARRIER_WARNING, GPU_ATOL, check_output
from tests.compare import load
from tests.devices import CPU, on_each_device
from tests.model_parallel.reference import ATOL, assert_matches, trained_in_one_process
from tests.performance.device_checks import check_barrier_names_the_gpu

SNIPPET = "model_parallel/pipeline_interleaved.py"
RANKS = 2
SCHEDULES = {"1F1B": 1, "Interleaved1F1B": 2, "ZBV": 2}  # name: stages per rank
MICROBATCHES = [2, 3, 4]
ROW = re.compile(r"^(\S+) +(\d) +(\d+) +[\d.]+ s +([\d.]+)% +([\d.]+)% +([\d.]+)%$", re.M)
LOSSES = re.compile(r"^(Interleaved1F1B|ZBV) +([\d. ]+?) +\(stages (.*)\)$", re.M)
ONE_PROCESS = re.compile(r"^one process +([\d. ]+?) +\(the unsplit model\)$", re.M)
#: How far the measured idle share may fall below the planned one: a sleep lasts at least
#: as long as asked, so only the clock's grain.
BELOW = 0.02


def formula(v, m):
    return (RANKS - 1) / (v * m + RANKS - 1)


def no_overlap():
    """The idle share if the ranks never worked at the same time: (p-1)/p."""
    return (RANKS - 1) / RANKS


def ceiling(planned):
    """Sends and the barriers around each step add idle time, more with two stages per
    rank (twice the sends), and more on a busy machine: the measured share must stay
    closer to the plan than to ranks that take turns, as in test_pipeline_bubble.py."""
    return (planned + no_overlap()) / 2


@shared
def result(device):
    run_ = run(SNIPPET, launcher="torchrun", nproc=RANKS, env=device.env("interleaved"))
    device.assert_ran(RANKS, "interleaved", run_)
    return run_


def parse_table(stdout):
    """{schedule: {micro-batches: (measured idle, planned idle, formula)}}"""
    rows = {}
    for name, v, m, measured, planned, expected in ROW.findall(stdout):
        assert int(v) == SCHEDULES[name], (name, v)
        rows.setdefault(name, {})[int(m)] = (float(measured) / 100, float(planned) / 100,
                                             float(expected) / 100)
    assert {name: sorted(r) for name, r in rows.items()} == {
        name: MICROBATCHES for name in SCHEDULES}, rows
    return rows


def check_table(table):
    """The plan of 1F1B and Interleaved1F1B is the formula, ZBV's is below it; every
    measured share is near its plan, and below 1F1B's at the same number of
    micro-batches."""
    for name, rows in table.items():
        v = SCHEDULES[name]
        for m, (measured, planned, expected) in rows.items():
            assert expected == pytest.approx(formula(v, m), abs=0.0005)
            if name == "ZBV":
                assert planned < formula(v, m) - 0.05, (m, planned)
            else:
                assert planned == pytest.approx(formula(v, m), abs=0.0005), (name, m, planned)
            assert planned - BELOW <= measured < ceiling(planned), (name, m, measured)
            if name != "1F1B":
                assert measured < table["1F1B"][m][0], (name, m, measured, table["1F1B"][m])


def test_output_matches_the_page():
    check_output(result(CPU))


@on_each_device(gpus=RANKS)
def test_two_stages_per_rank_leave_less_idle_time_than_one(device):
    check_table(parse_table(result(device).stdout))
    if device.cuda:
        assert BARRIER_WARNING not in result(device).text


def test_the_check_fails_for_ranks_that_take_turns():
    table = {name: {m: (no_overlap(), formula(v, m) - 0.1 * (name == "ZBV"), formula(v, m))
                    for m in MICROBATCHES} for name, v in SCHEDULES.items()}
    with pytest.raises(AssertionError):
        check_table(table)


def test_the_check_fails_when_interleaving_gains_nothing():
    table = {name: {m: (formula(1, m), formula(v, m) - 0.1 * (name == "ZBV"), formula(v, m))
                    for m in MICROBATCHES} for name, v in SCHEDULES.items()}
    with pytest.raises(AssertionError):
        check_table(table)


@on_each_device(gpus=RANKS)
def test_both_schedules_train_like_one_process(device):
    run_ = result(device)
    saved = load(run_.workdir / "pipeline_interleaved.pt")
    expected = trained_in_one_process(SNIPPET)
    atol = device.pick(ATOL, GPU_ATOL)
    printed = {name: ([float(x) for x in losses.split()], held)
               for name, losses, held in LOSSES.findall(run_.stdout)}
    assert list(saved) == list(printed) == ["Interleaved1F1B", "ZBV"]
    for name in saved:
        assert_matches(saved[name], expected, atol)
        assert printed[name][0] == pytest.approx(expected["losses"], abs=atol)
    one = ONE_PROCESS.findall(run_.stdout)
    assert len(one) == 1, run_.stdout
    assert [float(x) for x in one[0].split()] == pytest.approx(expected["losses"], abs=ATOL)
    assert printed["Interleaved1F1B"][1] == "rank 0: 0, 2; rank 1: 1, 3"
    assert printed["ZBV"][1] == "rank 0: 0, 3; rank 1: 1, 2"


def test_the_plan_of_a_one_stage_gpipe_is_the_formula_and_of_ranks_taking_turns_half():
    planned_idle = snippet_code(SNIPPET)["planned_idle"]
    m = 4
    gpipe = [[("F", r, i) for i in range(m)]
             + [(k, r, i) for i in range(m) for k in "IW"] for r in range(RANKS)]
    assert planned_idle(gpipe, RANKS - 1, split_backward=False) == pytest.approx(formula(1, m))
    # One micro-batch: the ranks can only take turns.
    one = [order[:1] + order[m:m + 2] for order in gpipe]
    assert planned_idle(one, RANKS - 1, split_backward=False) == pytest.approx(no_overlap())
    # An order that waits for itself cannot have run.
    with pytest.raises(RuntimeError):
        planned_idle([[("I", 0, 0), ("F", 0, 0)], []], 1, split_backward=False)


def test_each_stage_waits_for_its_input_before_it_works():
    """Forward and input gradient start only after wait_for_input has returned: under
    NCCL, wait() on a receive does not block the process, and a stage would never look
    idle. The weight gradient needs nothing received."""
    code = snippet_code(SNIPPET)
    stage = code["TimedStage"](3, 0.001)
    globals_ = code["Work"].forward.__globals__
    clock = []
    globals_["wait_for_input"] = lambda t: clock.append(time.perf_counter())
    x = torch.ones(2, 16, requires_grad=True)
    stage(x).sum().backward()
    events = globals_["events"]
    assert [(kind, s) for kind, s, *_ in events] == [("F", 3), ("I", 3), ("W", 3)]
    assert len(clock) == 2 and clock[0] <= events[0][2] and clock[1] <= events[1][2]
    plain = torch.nn.Linear(16, 16)
    plain.load_state_dict(stage.linear.state_dict())
    plain(x.detach()).sum().backward()
    assert torch.equal(stage.linear.weight.grad, plain.weight.grad)  # the sleeps change nothing


def test_stages_sit_on_the_ranks_the_schedules_expect():
    """The snippet's stage indices are those torch's schedules map to each rank:
    interleaved ones stage s on rank s % p, ZBV down the ranks and back up. (Imported
    here: the module is collected with older releases too, which lack this function.)"""
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping
    my_stages = snippet_code(SNIPPET)["my_stages"]
    for name, style in (("Interleaved1F1B", "loop"), ("ZBV", "v")):
        for world in (2, 4):
            mapping = generate_stage_to_rank_mapping(world, 2 * world, style=style)
            expected = [sorted(s for s, r in mapping.items() if r == rank) for rank in range(world)]
            assert [my_stages(name, rank, world, 2) for rank in range(world)] == expected


def test_waiting_for_input_synchronises_the_gpu_stream_and_leaves_cpu_tensors_alone(monkeypatch):
    code = snippet_code(SNIPPET)
    synchronised = []
    stream = types.SimpleNamespace(synchronize=lambda: synchronised.append(True))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: synchronised.append(device) or stream)
    code["wait_for_input"](types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1)))
    assert synchronised == [torch.device("cuda", 1), True]
    code["wait_for_input"](torch.zeros(1))
    assert len(synchronised) == 2


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)
