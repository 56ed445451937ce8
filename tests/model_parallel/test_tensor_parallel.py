"""snippets/model_parallel/tensor_parallel.py, shown on docs/model_parallel/tensor_parallel.md."""

import pytest

from harness.launch import run, snippet
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL, trained_in_one_process

SNIPPET = "model_parallel/tensor_parallel.py"
PLANS = ["tensor parallel", "+ sequence parallel"]


def assert_both_plans_match_one_process(result):
    saved = load(result.workdir / "tensor_parallel.pt")
    expected = trained_in_one_process(SNIPPET, "Net", steps=1)
    assert list(saved) == PLANS
    for plan in PLANS:
        assert saved[plan]["loss"] == pytest.approx(expected["losses"][0], abs=1e-5)
        assert_same_state(saved[plan]["grads"], expected["first_grads"], ATOL)


def collectives(stdout):
    """{plan: [forward, backward, optimizer step]} from the table of collectives."""
    rows = {}
    for line in stdout.splitlines():
        for plan in PLANS:
            if line.startswith(plan + " "):
                rows[plan] = [cell.strip() for cell in (line[21:53], line[53:85], line[85:])]
    return rows


@on_each_device(gpus=2, one_gpu=True)
def test_split_layers_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    """On one GPU a mesh of one device: each rank's piece is the whole matrix, on cuda:0."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    assert (f"attn.wq.weight: full (16, 16), on this rank ({16 // ranks}, 16), Shard(dim=0)"
            in result.stdout)
    assert (f"mlp.down.weight: full (16, 64), on this rank (16, {64 // ranks}), Shard(dim=1)"
            in result.stdout)
    if ranks == 1:  # nothing to exchange: DTensor leaves out every collective
        assert collectives(result.stdout) == {plan: ["-"] * 3 for plan in PLANS}
    else:
        assert collectives(result.stdout) == {
            # one all-reduce after each row-parallel layer (wo, down); in backward one per
            # column-parallel layer (wq, wk, wv, up), for the gradient of their common input
            "tensor parallel": ["all_reduce 2", "all_reduce 4", "-"],
            # each all-reduce becomes a reduce-scatter and an all-gather; the LayerNorm
            # gradients, partial on each rank, are summed when the optimiser reads them
            "+ sequence parallel": ["all_gather 3, reduce_scatter 2",
                                    "all_gather 3, reduce_scatter 2", "all_reduce 4"],
        }
    assert_both_plans_match_one_process(result)


#: Runs a script with the optimizers' default on a GPU, foreach: one call updates many tensors.
WITH_FOREACH = """\
import importlib, runpy, sys
for name in ("torch.optim.optimizer", "torch.optim.sgd"):
    module = importlib.import_module(name)
    module._default_to_fused_or_foreach = lambda *args, **kwargs: (False, True)
sys.argv.pop(0)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_optimizer_steps_as_it_would_on_gpus(tmp_path):
    """The model mixes DTensors and plain tensors; foreach, the default on GPUs, would get
    both in one call, which DTensor refuses."""
    wrapper = tmp_path / "with_foreach.py"
    wrapper.write_text(WITH_FOREACH)
    result = run(wrapper, str(snippet(SNIPPET)), launcher="torchrun", nproc=2,
                 workdir=tmp_path, world_size=2)
    assert_both_plans_match_one_process(result)
