"""snippets/model_parallel/hybrid_3d.py and its job script
snippets/model_parallel/hybrid_3d.sbatch, shown on docs/model_parallel/hybrid_3d.md.

The script runs as 8 processes, a 2 x 2 x 2 mesh, with reshard_after_forward False (as
the page shows it) and True (its exercise). The job script runs on the two simulated
nodes of the local Slurm cluster as the page shows it, one process per GPU of the
profile's nodes, and on a GPU cluster on the nodes and GPUs of the job the tests run in
(tests/slurm/clusters.py).
"""

import re

import pytest

from harness.launch import run, snippet_code
from harness.outputs import GPU_ATOL
from tests.devices import on_each_device
from tests.model_parallel.reference import (
    ATOL,
    assert_one_node_each,
    assert_run_matches,
    assert_stops_with_one_line,
    submit_job,
    trained_in_one_process,
)
from tests.slurm.clusters import on_each_cluster

SNIPPET = "model_parallel/hybrid_3d.py"
JOB_SCRIPT = "model_parallel/hybrid_3d.sbatch"
SEQUENCES, MICROBATCHES = 8, 2  # as in the script: assert_mesh checks them
ROWS = 16  # of a block's attn.wq.weight
#: FSDP groups of every stage: its block, and the stage itself (embedding or head)
GROUPS = 2


def mesh_table(stdout):
    """(rank, pp, dp, tp, node, sequences, wq rows, wq columns, all-gathers) per rank."""
    return [(int(r), int(pp), int(dp), int(tp), node, seqs, int(rows), int(cols), int(n))
            for r, pp, dp, tp, node, seqs, rows, _, cols, n in
            (line.split() for line in stdout.splitlines() if line[:4].strip().isdigit())]


def assert_mesh(table, pp, dp, tp, gathers):
    """Ranks numbered (pp, dp, tp) with tp fastest; each holds 1/(dp x tp) of wq; a copy
    (dp) sees its share of the batch in every stage; FSDP gathered ``gathers`` times."""
    assert [row[0] for row in table] == list(range(pp * dp * tp))
    code = snippet_code(SNIPPET)  # here, not at import: it stops on older releases
    assert (code["SEQUENCES"], code["MICROBATCHES"]) == (SEQUENCES, MICROBATCHES)
    share = SEQUENCES // dp
    for rank, p, d, t, node, seqs, rows, cols, count in table:
        assert (p, d, t) == (rank // (dp * tp), rank // tp % dp, rank % tp)
        assert seqs == f"{d * share}-{(d + 1) * share - 1}"
        assert (rows, cols) == (ROWS // (dp * tp), 16)
        assert count == gathers, (rank, count)


@pytest.mark.parametrize("reshard", [False, True], ids=["kept", "resharded"])
@on_each_device(gpus=8)
def test_eight_ranks_give_the_loss_and_gradients_of_one_process(device, reshard, tmp_path):
    """Kept gathered, FSDP all-gathers each group once a step; resharded after every
    forward pass, once per micro-batch and once more for the backward passes (between
    which the schedule keeps the weights gathered)."""
    args = ["--reshard-after-forward"] if reshard else []
    result = run(SNIPPET, *args, launcher="torchrun", nproc=8, workdir=tmp_path,
                 env=device.env())
    device.assert_ran(8, result=result)
    device.check_output(result, variant="reshard" if reshard else None)
    assert f"reshard_after_forward={reshard}" in result.stdout
    assert_mesh(mesh_table(result.stdout), 2, 2, 2,
                gathers=GROUPS * (MICROBATCHES + 1) if reshard else GROUPS)
    assert re.findall(r"(?m)^stage \d holds: .*$", result.stdout) == [
        "stage 0 holds: embed, layers.0", "stage 1 holds: layers.1, head"]
    assert_run_matches(result, trained_in_one_process(SNIPPET, "Net"),
                       atol=device.pick(ATOL, GPU_ATOL))


@on_each_cluster()
def test_the_job_script_puts_one_stage_on_each_node(cluster):
    """pp = the nodes, dp = 2, tp = half the GPUs of a node: each stage, and so each
    tensor-parallel group, on one node; the training of one process."""
    result = submit_job(cluster, JOB_SCRIPT, SNIPPET)
    table = mesh_table(result.stdout)
    assert_mesh(table, cluster.nodes, 2, cluster.gpus_per_node // 2, gathers=GROUPS)
    node_of_stage = {}
    for rank, pp, dp, tp, node, *_ in table:
        assert node_of_stage.setdefault(pp, node) == node  # a stage on one node
    assert_one_node_each(cluster, result, node_of_stage)  # each stage on its own node
    assert_run_matches(result, trained_in_one_process(SNIPPET, "Net"),
                       atol=cluster.pick(ATOL, GPU_ATOL))


@pytest.mark.parametrize("nproc, sizes, message", [
    (2, ("--pp", "2", "--dp", "2", "--tp", "2"),
     "--pp x --dp x --tp is 8, but torchrun started 2 processes"),
    (3, ("--pp", "1", "--dp", "1", "--tp", "3"),
     "--pp must divide 2 blocks, --tp 8 heads, and --dp x 2 micro-batches 8 sequences")],
    ids=["not the processes", "not the model"])
def test_sizes_that_do_not_fit_stop_the_script_with_one_line(nproc, sizes, message, tmp_path):
    """As the page says: one line, from every process, before any process group."""
    assert_stops_with_one_line(SNIPPET, sizes, nproc, message, tmp_path)
