"""snippets/model_parallel/hybrid_2d.py, shown on docs/model_parallel/hybrid.md, and its job
script snippets/model_parallel/hybrid_2d.sbatch, shown on docs/model_parallel/hybrid_3d.md.

The job script runs on the two simulated nodes of the local Slurm cluster as the page
shows it, one process per GPU of the profile's nodes, and on a GPU cluster on the nodes
and GPUs of the job the tests run in (tests/slurm/clusters.py).
"""

import pytest

from harness.launch import run
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

SNIPPET = "model_parallel/hybrid_2d.py"
JOB_SCRIPT = "model_parallel/hybrid_2d.sbatch"
ROWS = 16  # of block.attn.wq.weight


def mesh_table(stdout):
    """(rank, dp, tp, node, sequences, wq rows, wq columns) for every rank."""
    return [(int(r), int(dp), int(tp), node, seqs, int(rows), int(cols))
            for r, dp, tp, node, seqs, rows, _, cols in
            (line.split() for line in stdout.splitlines() if line[:4].strip().isdigit())]


@on_each_device(gpus=4)
def test_four_ranks_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=4, workdir=tmp_path, env=device.env())
    device.assert_ran(4, result=result)
    device.check_output(result)
    # Rows of the mesh split the data, columns split the matrices: a 16 x 16 wq is cut
    # into 4 x 16 pieces, by 2 for tensor parallelism, then by 2 for FSDP.
    assert [row[:3] + row[4:] for row in mesh_table(result.stdout)] == [
        (0, 0, 0, "0-3", 4, 16), (1, 0, 1, "0-3", 4, 16),
        (2, 1, 0, "4-7", 4, 16), (3, 1, 1, "4-7", 4, 16)]
    assert_run_matches(result, trained_in_one_process(SNIPPET, "Net"),
                       atol=device.pick(ATOL, GPU_ATOL))


@on_each_cluster()
def test_the_job_script_keeps_tensor_parallelism_inside_each_node(cluster):
    """tp = the GPUs of a node, dp = the nodes: every rank of a tensor-parallel group on
    one node, each node one copy of the model; the training of one process."""
    nodes, gpus = cluster.nodes, cluster.gpus_per_node
    result = submit_job(cluster, JOB_SCRIPT, SNIPPET)
    table = mesh_table(result.stdout)
    assert [row[0] for row in table] == list(range(nodes * gpus))
    node_of_copy = {}
    for rank, dp, tp, node, seqs, rows, cols in table:
        assert (dp, tp) == divmod(rank, gpus)  # a copy is a block of consecutive ranks
        assert node_of_copy.setdefault(dp, node) == node  # ... on one node
        assert (rows, cols) == (ROWS // (nodes * gpus), 16)  # 1/(dp x tp) of wq
        share = 8 // nodes
        assert seqs == f"{dp * share}-{(dp + 1) * share - 1}"
    assert_one_node_each(cluster, result, node_of_copy)  # and each copy on its own node
    assert_run_matches(result, trained_in_one_process(SNIPPET, "Net"),
                       atol=cluster.pick(ATOL, GPU_ATOL))


@pytest.mark.parametrize("nproc, sizes, message", [
    (2, ("--dp", "2", "--tp", "2"), "--dp x --tp is 4, but torchrun started 2 processes"),
    (3, ("--dp", "1", "--tp", "3"), "--tp must divide 8 heads, and --dp 8 sequences")],
    ids=["not the processes", "not the model"])
def test_sizes_that_do_not_fit_stop_the_script_with_one_line(nproc, sizes, message, tmp_path):
    assert_stops_with_one_line(SNIPPET, sizes, nproc, message, tmp_path)
