"""One-process reference runs for the model-parallel snippets, and comparisons with them.

Every split model must compute what the unsplit model computes in one process on the
same batch: the same losses and gradients (to 1e-5), hence the same trained weights.
"""


from pathlib import Path

import pytest
import torch

from harness.launch import run, snippet_code
from harness.outputs import check_output
from tests.compare import assert_same_state, load
from tests.slurm.jobs import job_nodes

ATOL = 1e-5


def one_process(model, x, y, steps, lr=0.1):
    """Train ``model`` on the whole batch with SGD, as every snippet does, on the CPU.

    Returns the losses, the first step's gradients and the final weights.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, first_grads = [], None
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if first_grads is None:
            first_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "first_grads": first_grads, "model": model.state_dict()}


def trained_in_one_process(path, build="build_model", steps=None):
    """The snippet's own model (``build()`` after seed 0) and batch, trained by one_process."""
    code = snippet_code(path)
    torch.manual_seed(0)
    model = code[build]()
    return one_process(model, *code["make_batch"](), steps=steps or code["STEPS"])


def assert_matches(saved, reference, atol=ATOL):
    """A snippet's saved {losses, first_grads, model} equals the one-process reference."""
    torch.testing.assert_close(torch.tensor(saved["losses"]), torch.tensor(reference["losses"]),
                               rtol=0, atol=atol)
    assert_same_state(saved["first_grads"], reference["first_grads"], atol)
    assert_same_state(saved["model"], reference["model"], atol)


def printed_losses(stdout):
    """The losses a snippet printed as 'step N: loss X'."""
    return [float(line.split("loss ")[1].split()[0])
            for line in stdout.splitlines() if line.startswith("step ")]


def assert_run_matches(result, expected, atol=ATOL):
    """A run's printed losses, and the <snippet>.pt it saved, equal the reference."""
    saved = load(result.workdir / f"{result.script.stem}.pt")
    assert_matches(saved, expected, atol)
    assert printed_losses(result.stdout) == pytest.approx(expected["losses"], abs=atol)


def assert_stops_with_one_line(script, sizes, nproc, message, workdir):
    """``script`` started by torchrun with mesh sizes that do not fit stops in every
    process with argparse's one line, before anything else can fail."""
    result = run(script, *sizes, launcher="torchrun", nproc=nproc, workdir=workdir,
                 check=False, timeout=120)
    assert not result.timed_out and result.returncode != 0, result.report()
    line = f"{Path(script).name}: error: {message}\n"
    assert result.text.count(line) == nproc, result.report()
    assert "Error:" not in result.text.replace("ChildFailedError:", ""), result.report()


def submit_job(cluster, job_script, script):
    """``job_script`` submitted with ``script`` on every GPU of the cluster's nodes, one
    torchrun per node; on the local cluster its output compared with the page's."""
    result = cluster.submit(job_script, world_size=cluster.nodes * cluster.gpus_per_node,
                            files=(script,), workdir=cluster.folder(Path(script).stem),
                            sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(result, variant="slurm")
    return result


def assert_one_node_each(cluster, result, node_of):
    """Each group of ranks ({group: its node}) on a node of its own, every node used."""
    assert len(set(node_of.values())) == cluster.nodes
    if not cluster.real:
        assert sorted(node_of.values()) == job_nodes(result) == ["node1", "node2"]
