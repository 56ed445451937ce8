"""snippets/tools/estimate_memory.py, shown on docs/memory/choosing.md.

The estimator is checked against the real strategies: the memory chapter's
snippets (zero1.py for DDP and ZeRO-1, fsdp2.py, deepspeed_zero.py with every
config) run with torchrun or deepspeed at 1, 2 and 4 ranks and print the bytes
each rank holds; every category on every rank must be within 5 % of the
estimate. The measured-versus-estimated table on the page is written from the
same runs (they are shared with tests/memory, so each happens once).
"""

import json

import pytest

from harness.launch import run
from harness.outputs import check_output, check_text
from tests.devices import CPU, on_each_device
from tests.memory.runs import (FSDP2_RUNS, HAVE_DEEPSPEED, PARAMETERS, deepspeed_run,
                               deepspeed_tables, held_table, needs_deepspeed, torchrun,
                               torchrun_on)

SNIPPET = "tools/estimate_memory.py"
RANKS = (1, 2, 4)
CATEGORIES = ("parameters", "gradients", "optimizer")
#: DeepSpeed config -> (strategy, offload)
DS_STRATEGIES = {"ds_config_zero1.json": ("zero1", False), "ds_config_zero2.json": ("zero2", False),
                 "ds_config_zero3.json": ("zero3", False),
                 "ds_config_zero2_offload.json": ("zero2", True),
                 "ds_config_zero3_offload.json": ("zero3", True)}


def estimate(*args, check=True):
    """Run the estimator as a reader would."""
    return run(SNIPPET, *map(str, args), check=check)


def estimated(ranks, strategy, framework, precision, offload):
    args = ["--params", PARAMETERS, "--gpus", ranks, "--strategy", strategy, "--framework",
            framework, "--precision", precision, "--json"] + (["--offload"] if offload else [])
    row, = json.loads(estimate(*args).stdout)
    return row["states"]


def measured(device=CPU):
    """One row per strategy and world size: what the snippets printed for every rank. On
    GPUs zero1.py's rows alone (DDP and ZeRO-1), at one process per GPU."""
    rows = []
    for n in (device.ranks(2),) if device.cuda else RANKS:
        tables = held_table(torchrun_on(device, "memory/zero1.py", n).stdout,
                            "Adam|ZeroRedundancyOptimizer")  # on GPUs: NCCL ran in each
        rows.append((n, "ddp", "pytorch", "fp32", False, tables["Adam"]))
        rows.append((n, "zero1", "pytorch", "fp32", False, tables["ZeroRedundancyOptimizer"]))
    if device.cuda:
        return rows
    for n, options in FSDP2_RUNS.items():
        table = held_table(torchrun("memory/fsdp2.py", n, *options).stdout)[""]
        precision = "bf16" if "--bf16" in options else "fp32"
        rows.append((n, "fsdp2", "pytorch", precision, "--offload" in options, table))
    if HAVE_DEEPSPEED:
        for n in RANKS:
            tables = deepspeed_tables(deepspeed_run(n).stdout)
            for config, (strategy, offload) in DS_STRATEGIES.items():
                rows.append((n, strategy, "deepspeed", "fp32", offload, tables[config]))
    return sorted(rows, key=lambda row: row[0])


def compare(device=CPU):
    """[(row label, ranks, measured per rank, estimated {category: (gpu, host)})]."""
    return [(f"{strategy} {framework}{' + offload' if offload else ''}"
             f"{', ' + precision if precision != 'fp32' else ''}",
             n, table, estimated(n, strategy, framework, precision, offload))
            for n, strategy, framework, precision, offload, table in measured(device)]


@pytest.fixture(scope="module")
def comparison():
    """The comparison on the CPU, for every strategy at 1, 2 and 4 ranks."""
    return compare(CPU)


@on_each_device(gpus=2)
def test_estimate_is_within_5_percent_for_every_strategy_rank_and_category(device, request):
    """On GPUs zero1.py's runs, one process per GPU: CUDA allocations, not CPU ones; the
    same bytes must come out."""
    comparison = compare(device) if device.cuda else request.getfixturevalue("comparison")
    assert {n for _, n, _, _ in comparison} == ({device.ranks(2)} if device.cuda else set(RANKS))
    problems = []
    for label, n, table, states in comparison:
        assert len(table) == n
        for rank, held in enumerate(table):
            for category, got in zip(CATEGORIES, held):
                want = sum(states[category])  # on the GPU and in CPU memory
                if abs(got - want) > 0.05 * want:
                    problems.append(f"{label}, {n} ranks, rank {rank}, {category}: "
                                    f"measured {got:.0f} bytes, estimated {want:.0f}")
    assert not problems, "\n".join(problems)


@needs_deepspeed
def test_measured_against_estimated_table(comparison):
    """The table on the page, written from the same runs (rank 0 of each)."""
    kib = "{:7.1f}".format
    lines = [f"Rank 0's model states in KiB, measured / estimated; {PARAMETERS:,} parameters, Adam",
             f"{'ranks':>5}  {'strategy':<27} {'parameters':>16}  {'gradients':>16}  "
             f"{'optimiser':>16}  {'total':>6}"]
    for label, n, table, states in comparison:
        cells = [f"{kib(got / 1024)} /{kib(sum(states[c]) / 1024)}"
                 for c, got in zip(CATEGORIES, table[0])]
        total = sum(sum(states[c]) for c in CATEGORIES)
        lines.append(f"{n:>5}  {label:<27} {'  '.join(cells)}  "
                     f"{100 * (sum(table[0]) - total) / total:+5.1f}%")
    check_text("\n".join(lines) + "\n", SNIPPET, variant="validation", command=())


#: What the page shows.
EXAMPLES = {
    "7b": ["--layers", "32", "--hidden", "4096", "--vocab", "32000", "--gpus", "8",
           "--gpu-memory", "80"],
    "70b": ["--params", "70B", "--gpus", "8", "--gpu-memory", "80"],
    "70b-offload": ["--params", "70B", "--gpus", "8", "--gpu-memory", "80", "--offload"],
    "70b-32": ["--params", "70B", "--gpus", "32", "--gpu-memory", "80", "--strategy", "fsdp2",
               "zero3"],
    # docs/recipes/fine_tune.md: a 7B model on one node of 40 GB A100s
    "7b-a100": ["--params", "7B", "--gpus", "8", "--gpu-memory", "40", "--strategy", "ddp",
                "fsdp2"],
}


@pytest.mark.parametrize("variant", EXAMPLES)
def test_examples_on_the_page(variant):
    result = estimate(*EXAMPLES[variant])
    check_output(result, variant=variant)
    assert "Not included: activations" in result.stdout


def test_sixteen_bytes_per_parameter_with_adam_and_their_shards():
    psi, n = 7_000_000_000, 8
    rows = {(r["strategy"], r["framework"]): r for r in json.loads(
        estimate("--params", "7B", "--gpus", n, "--json").stdout)}
    assert rows["ddp", "pytorch"]["gpu_total"] == 16 * psi
    assert rows["zero1", "pytorch"]["gpu_total"] == (4 + 4 + 8 / n) * psi
    assert rows["fsdp2", "pytorch"]["gpu_total"] == 16 * psi / n
    assert rows["zero3", "deepspeed"]["gpu_total"] == 16 * psi / n  # bf16: 2 + 2 + (4 + 8)
    assert rows["zero2", "deepspeed"]["gpu_total"] == (2 + 14 / n) * psi
    sgd, = json.loads(estimate("--params", "1e6", "--precision", "fp32", "--optimizer", "sgd",
                               "--strategy", "ddp", "--json").stdout)
    assert sgd["gpu_total"] == 12e6  # 4 + 4 + one momentum buffer


def test_a_transformer_config_gives_its_parameter_count():
    row, = json.loads(estimate("--layers", "2", "--hidden", "8", "--vocab", "10",
                               "--strategy", "ddp", "--json").stdout)
    assert row["params"] == 2 * (12 * 8 * 8 + 13 * 8) + 10 * 8


@pytest.mark.parametrize("args, message", [
    (["--params", "-5"], "must be at least 1"),
    (["--params", "0"], "must be at least 1"),
    (["--params", "lots"], "not a size"),
    (["--params", "1e400"], "must be at least 1 and finite"),
    (["--params", "7B", "--gpu-memory", "nan"], "must be greater than 0 and finite"),
    (["--params", "7B", "--gpus", "0"], "--gpus must be at least 1"),
    (["--params", "7B", "--gpus", "-4"], "--gpus must be at least 1"),
    (["--params", "7B", "--strategy", "zero4"], "invalid choice: 'zero4'"),
    (["--params", "7B", "--strategy", "fsdp2", "--framework", "deepspeed"], "deepspeed has no fsdp2"),
    (["--params", "7B", "--strategy", "ddp", "--offload"], "cannot offload"),
    (["--layers", "-2", "--hidden", "64"], "must be at least 1"),
    (["--layers", "2"], "--layers needs --hidden"),
    (["--params", "7B", "--gpu-memory", "-80"], "must be greater than 0"),
    ([], "one of the arguments --params --layers is required"),
])
def test_bad_input_is_a_usage_error_not_a_traceback(args, message):
    result = estimate(*args, check=False)
    err = result.outputs[0].stderr
    assert result.returncode == 2, err
    assert message in err and "usage:" in err
    assert "Traceback" not in err and not result.stdout
