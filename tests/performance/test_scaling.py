"""snippets/performance/scaling.py and its job script snippets/performance/scaling.sbatch,
shown on docs/performance/scaling.md.

The benchmark runs as the job script runs it, with the variables its srun tasks set (the
`env` launcher), into one results file, for 1, 2 and 4 ranks.
"""

import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.launch import ROOT, run, shared, snippet
from harness.outputs import BARRIER_WARNING, check_output
from tests.devices import on_each_device
from tests.on_gpus import assert_gpu_path
from tests.performance.device_checks import check_barrier_names_the_gpu
from tests.performance.reference import snippet_code
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real

SNIPPET = "performance/scaling.py"
JOB_SCRIPT = "performance/scaling.sbatch"
#: GPUs the GPU case measures up to (the CPU case measures 1, 2 and 4 ranks).
RANKS = 2
#: scaling.py's first line: what ran ("CPU" or the GPU's name) and the backend.
SETUP = r"^(?P<kind>.+), (?P<backend>\w+): \d+ x \d+ MLP, batch \d+ per rank$"
# The page's CPU figures use these, to finish in seconds.
SMALL = ("--steps", "10", "--warmup", "2", "--width", "256", "--batch-size", "64")
PAGE_PLOT = ROOT / "docs" / "performance" / "scaling_cpu.png"


def rows(stdout):
    """[(ranks, samples/s, speed-up, efficiency)] from the printed table."""
    found = re.findall(r"^ +(\d+) +(\d+) samples/s +([\d.]+)x +(\d+)%$", stdout, re.M)
    return [(int(n), float(rate), float(speedup), int(eff)) for n, rate, speedup, eff in found]


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
@shared
def runs():
    workdir = Path(tempfile.mkdtemp(prefix="scaling-"))
    results = {n: run(SNIPPET, *SMALL, launcher="torchrun", nproc=n, workdir=workdir)
               for n in (1, 2, 4)}
    return workdir, results


@on_each_device(gpus=RANKS, one_gpu=True)
def test_each_run_adds_its_row_and_prints_the_table(request, tmp_path, device):
    """The page's torchrun loop: on the CPU, for 1, 2 and 4 ranks, as the page shows; on
    GPUs, at the default size, for 1 rank and up to one per GPU. Times are a clock's: only the table's structure is asserted."""
    if device.gpus:
        workdir = tmp_path
        results = {n: run(SNIPPET, *device.pick(SMALL, ()), launcher="torchrun", nproc=n,
                          workdir=workdir) for n in range(1, device.ranks(RANKS) + 1)}
    else:
        workdir, results = request.getfixturevalue("runs")
    for n, result in results.items():
        table = rows(result.stdout)
        assert [row[0] for row in table] == [r for r in results if r <= n]
        assert table[0][2:] == (1.0, 100)  # the base run
        for ranks, rate, speedup, efficiency in table:
            assert rate > 0
            assert abs(speedup / ranks * 100 - efficiency) <= 1  # efficiency = speed-up / ranks
    assert len((workdir / "scaling.jsonl").read_text().splitlines()) == len(results)
    if not device.gpus:
        check_output(results[4])
        assert results[4].stdout.startswith("CPU, gloo: 4 x 256 MLP, batch 64 per rank")
        return
    for result in results.values():
        assert BARRIER_WARNING not in result.text
        if device.cuda:  # the GPU's name, then the backend
            setup = assert_gpu_path(result.stdout, SETUP, count=1)[0]
            assert setup["kind"] != "CPU"
    assert png_size(workdir / "scaling.png") == (900, 350)


def test_the_plot_is_a_png(runs):
    workdir, _ = runs
    assert png_size(workdir / "scaling.png") == (900, 350)
    if os.environ.get("UPDATE_OUTPUTS") == "1":  # the page shows this run's plot
        shutil.copyfile(workdir / "scaling.png", PAGE_PLOT)
    assert png_size(PAGE_PLOT) == (900, 350)


def test_bad_arguments_give_a_clear_error(capsys, monkeypatch):
    parse_args = snippet_code(SNIPPET)["parse_args"]  # main() calls it before anything else
    monkeypatch.setattr("sys.argv", ["scaling.py"])  # as `python scaling.py ...` would see it
    for argv, message in (
        (["--steps", "0"], "scaling.py: error: argument --steps: must be at least 1, not 0"),
        (["--plot", "scaling.pdf"], "scaling.py: error: --plot must name a .png file"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_job_script_is_valid_bash_that_runs_the_benchmark_for_several_rank_counts():
    path = snippet(JOB_SCRIPT)
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    assert re.search(r"^#SBATCH --time=", text, re.M)
    assert "for n in 1 2 4 8; do" in text and 'srun --nodes="$nodes" --ntasks="$n"' in text
    assert "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS" in text
    command = re.search(r"exec python scaling.py (.*)'", text).group(1)
    snippet_code(SNIPPET)["parse_args"](shlex.split(command))  # arguments the benchmark accepts


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)


@on_the_gpu_cluster(gpus=4)
def test_the_job_script_on_a_gpu_cluster():
    """The job script on the cluster the tests run in (tests/slurm/real_cluster.py). It
    measures 1, 2, 4 and 8 GPUs, so it needs that job to have 2 nodes of 4 GPUs."""
    cluster = real_cluster(gpus=4)
    if cluster.nodes < 2:
        pytest.skip("scaling.sbatch measures up to 8 GPUs: needs a job of 2 nodes with 4 GPUs")
    result = submit_real(cluster, JOB_SCRIPT, files=(SNIPPET,),
                         sbatch_args=cluster.shape(gpus_per_node=4))
    # every srun step prints the setup and the table so far: the last one has all four
    last = assert_gpu_path(result.stdout, SETUP, count=4)[-1]
    assert [row[0] for row in rows(result.stdout[last.end():])] == [1, 2, 4, 8]
    assert len((result.workdir / "scaling.jsonl").read_text().splitlines()) == 4
    assert png_size(result.workdir / "scaling.png") == (900, 350)
