"""snippets/model_parallel/pipeline_bubble.py, shown on docs/model_parallel/pipeline.md."""

import re

import pytest

from harness.launch import run
from harness.outputs import check_output

SNIPPET = "model_parallel/pipeline_bubble.py"
STAGES = 2
ROW = re.compile(r"^(GPipe|1F1B) +(\d+) +[\d.]+ s +([\d.]+)% +([\d.]+)% +(\d+)$", re.M)


def formula(m):
    return (STAGES - 1) / (m + STAGES - 1)


@pytest.fixture(scope="module")
def result():
    return run(SNIPPET, launcher="torchrun", nproc=STAGES)


@pytest.fixture(scope="module")
def table(result):
    """{schedule: [(micro-batches, measured idle, formula, micro-batches held by rank 0)]}"""
    rows = {}
    for name, m, measured, expected, held in ROW.findall(result.stdout):
        rows.setdefault(name, []).append((int(m), float(measured) / 100, float(expected) / 100, int(held)))
    assert list(rows) == ["GPipe", "1F1B"] and all(len(r) == 3 for r in rows.values())
    return rows


def diagrams(stdout):
    """{schedule: [the cells of each rank's row]} from the drawings after the table."""
    drawn, current = {}, None
    for line in stdout.splitlines():
        if line.endswith("micro-batches (F3 = forward of micro-batch 3; .. = idle):"):
            current = drawn.setdefault(line.split(",")[0], [])
        elif line.startswith("rank ") and current is not None:
            current.append(line.split("| ")[1].split())
    return drawn


def test_output_matches_the_page(result):
    check_output(result)


def test_measured_idle_time_falls_with_more_micro_batches_as_the_formula_says(table):
    for name, rows in table.items():
        measured = [idle for _, idle, _, _ in rows]
        assert measured == sorted(measured, reverse=True), (name, measured)
        for m, idle, expected, _ in rows:
            assert expected == pytest.approx(formula(m), abs=0.0005)
            # Sending activations costs a little on top of the bubble itself.
            assert formula(m) - 0.02 <= idle <= formula(m) + 0.12, (name, m, idle)


def test_1f1b_holds_fewer_micro_batches_than_gpipe(table):
    assert [(m, held) for m, *_, held in table["GPipe"]] == [(m, m) for m, *_ in table["GPipe"]]
    assert [held for *_, held in table["1F1B"]] == [STAGES] * 3


def test_drawings_are_what_the_schedules_promise(result):
    drawn = diagrams(result.stdout)
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
