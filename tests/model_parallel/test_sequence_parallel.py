"""snippets/model_parallel/sequence_parallel.py, shown on
docs/model_parallel/sequence_parallel.md."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from harness.launch import run, snippet, snippet_code
from harness.outputs import GPU_ATOL
from tests.compare import load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL, assert_matches

SNIPPET = "model_parallel/sequence_parallel.py"
RUNS = ["one process", "tensor parallel", "+ sequence parallel"]
SPLIT = RUNS[1:]
BATCH, SEQ, VOCAB, DIM, LAYERS = 4, 8, 256, 16, 2
FLOAT = 4  # bytes


def trained_in_one_process():
    """The unsplit model trained here with SGD on the whole batch: losses, the first
    step's gradients, the final weights."""
    code = snippet_code(SNIPPET)
    assert (code["VOCAB"], code["DIM"], code["LAYERS"]) == (VOCAB, DIM, LAYERS)
    torch.manual_seed(0)
    model = code["Net"]()
    tokens, targets = code["make_batch"]()
    assert tokens.shape == (BATCH, SEQ)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, first_grads = [], None
    for _ in range(code["STEPS"]):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        first_grads = first_grads or {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "first_grads": first_grads, "model":
            {n: p.detach() for n, p in model.named_parameters()}}


def ring(op, whole, n):
    """Bytes each of n ranks sends in a ring: (n-1)/n of the whole tensor for a
    reduce-scatter or an all-gather, twice that for an all-reduce."""
    return (2 if op == "all_reduce" else 1) * (n - 1) * whole // n


def expected_collectives(n):
    """{(run, phase, collective): (count, bytes of the whole tensor)} of one step."""
    if n == 1:  # nothing to exchange: DTensor leaves out every collective
        return {}
    activation = BATCH * SEQ * DIM * FLOAT  # what the blocks pass on
    logits = BATCH * SEQ * VOCAB * FLOAT
    norms = 2 * LAYERS + 1  # two in each block and the final one, a weight of DIM each
    row_wise = 1 + 2 * LAYERS  # embed, and wo and down in each block
    gathered = 2 * LAYERS + 1  # the inputs of attention and the MLP in each block, output
    return {
        # the partial sums of the row-wise layers are added up...
        ("tensor parallel", "forward", "all_reduce"): (row_wise, activation),
        # ...and the output layer gathers the logits of the whole vocabulary
        ("tensor parallel", "forward", "all_gather"): (1, logits),
        # the gradient of each input that column-wise layers read, partial on each rank
        ("tensor parallel", "backward", "all_reduce"): (gathered, activation),
        # sequence parallelism: each all-reduce becomes a reduce-scatter...
        ("+ sequence parallel", "forward", "reduce_scatter"): (row_wise, activation),
        # ...and an all-gather before the next column-wise layers
        ("+ sequence parallel", "forward", "all_gather"): (gathered, activation),
        ("+ sequence parallel", "forward", "all_gather", "logits"): (1, logits),
        # in the backward pass, the same in reverse
        ("+ sequence parallel", "backward", "reduce_scatter"): (gathered, activation),
        ("+ sequence parallel", "backward", "all_gather"): (row_wise, activation),
        # the norms' weights saw part of the tokens: partial gradients, summed in the step
        ("+ sequence parallel", "step", "all_reduce"): (norms, DIM * FLOAT),
    }


COLLECTIVE = re.compile(r"(?m)^(tensor parallel|\+ sequence parallel) +(forward|backward|step)"
                        r" +(\w+) +(\d+) +(\d+) B +(\d+) B$")
IN_ALL = re.compile(r"(?m)^(tensor parallel|\+ sequence parallel) +in all +(\d+) B$")
LOSSES = re.compile(r"(?m)^(one process|tensor parallel|\+ sequence parallel): losses (.*)$")
DIFFERENCE = re.compile(r"(?m)^(tensor parallel|\+ sequence parallel): largest difference "
                        r"from one process: gradients (\S+), weights (\S+)$")


def assert_collectives(stdout, n):
    found = {}
    for name, phase, op, count, whole, sent in COLLECTIVE.findall(stdout):
        key = (name, phase, op) + (("logits",) if int(whole) == BATCH * SEQ * VOCAB * FLOAT
                                   and name.startswith("+") else ())
        assert key not in found, key
        found[key] = (int(count), int(whole))
        assert int(sent) == int(count) * ring(op, int(whole), n), (key, sent)
    expected = expected_collectives(n)
    assert found == expected
    totals = dict(IN_ALL.findall(stdout))
    for name in SPLIT:
        total = sum(count * ring(key[2], whole, n)
                    for key, (count, whole) in expected.items() if key[0] == name)
        assert int(totals[name]) == total, name
    if n > 1:
        # each all-reduce of tensor parallelism became a reduce-scatter and an all-gather
        # that send as much: only the norms' gradients are extra
        assert int(totals["+ sequence parallel"]) - int(totals["tensor parallel"]) == (
            ring("all_reduce", DIM * FLOAT, n) * (2 * LAYERS + 1))


def assert_shapes(stdout, n):
    for name, shape, piece, placement in [
            ("embed.weight", (VOCAB, DIM), (VOCAB // n, DIM), "Shard(dim=0)"),  # vocabulary
            ("layers.0.attention.wq.weight", (DIM, DIM), (DIM // n, DIM), "Shard(dim=0)"),
            ("layers.1.attention.wq.weight", (DIM, DIM), (DIM // n, DIM), "Shard(dim=0)"),
            ("layers.1.mlp.down.weight", (DIM, 4 * DIM), (DIM, 4 * DIM // n), "Shard(dim=1)"),
            ("layers.1.mlp_norm.weight", (DIM,), (DIM,), "Replicate()"),
            ("output.weight", (VOCAB, DIM), (VOCAB // n, DIM), "Shard(dim=0)")]:
        assert re.search(rf"(?m)^{re.escape(name)} +full {re.escape(str(shape))} +on this "
                         rf"rank {re.escape(str(piece))} +{re.escape(placement)}$", stdout), name
    # 2 norms, 4 linear layers with a bias each and 2 more in every block; embed, norm, output
    params = LAYERS * (2 + 2 * 4 + 2 * 2) + 3
    assert f"tensor parallel: {params - (2 * LAYERS + 1)} of {params} parameters are DTensors" \
        in stdout  # the wildcards reached every block; the norms stay plain tensors
    assert f"+ sequence parallel: {params} of {params} parameters are DTensors" in stdout
    whole, split = (BATCH, SEQ, DIM), (BATCH, SEQ // n, DIM)
    for place, tp, sp in [("between blocks", whole, split), ("output of a norm", whole, split),
                          ("output of wq", (BATCH, SEQ, DIM // n), (BATCH, SEQ, DIM // n))]:
        assert re.search(rf"(?m)^{place} +{re.escape(str(tp))} +{re.escape(str(sp))}$",
                         stdout), place


@on_each_device(gpus=2, one_gpu=True)
def test_sequence_parallel_training_equals_one_process(device, tmp_path):
    """On one GPU a mesh of one device: every rank holds everything and sends nothing."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    stdout = result.stdout
    assert_shapes(stdout, ranks)
    assert_collectives(stdout, ranks)

    atol = device.pick(ATOL, GPU_ATOL)  # on GPUs: the same maths in other kernels
    expected = trained_in_one_process()
    saved = load(result.workdir / "sequence_parallel.pt")
    assert list(saved) == RUNS
    for name in RUNS:
        assert_matches(saved[name], expected, atol)
    printed = {name: [float(x) for x in losses.split()] for name, losses in LOSSES.findall(stdout)}
    assert list(printed) == RUNS
    for name in RUNS:
        assert printed[name] == pytest.approx(expected["losses"], abs=atol), name
    differences = DIFFERENCE.findall(stdout)
    assert [name for name, _, _ in differences] == SPLIT
    for name, grads, weights in differences:
        for shown, what in ((grads, "first_grads"), (weights, "model")):
            actual = max((saved[name][what][k] - saved["one process"][what][k]).abs().max().item()
                         for k in expected[what])
            assert float(shown) == pytest.approx(actual, rel=0.1, abs=1e-12), (name, what)
            assert float(shown) <= atol, (name, what)


#: Run as 2 ranks: the first exercise, a plan key with a typo.
TYPO = """
import json
import runpy
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import parallelize_module

code = runpy.run_path(SNIPPET)
dist.init_process_group("gloo")
try:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    plan = code["make_plan"](Shard(1))
    plan["layers.*.atention.wq"] = plan.pop("layers.*.attention.wq")
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = parallelize_module(code["Net"](), mesh, plan)
    found = {"warnings": [str(w.message).split(" in module")[0] for w in caught],
             "wq": [type(block.attention.wq.weight).__name__ for block in model.layers]}
    tokens, targets = code["make_batch"]()
    try:
        model(tokens)
    except Exception as e:
        found["error"] = f"{type(e).__name__}: {e}"
    if dist.get_rank() == 0:
        print(json.dumps(found))
finally:
    dist.destroy_process_group()
"""


def test_a_plan_key_with_a_typo(tmp_path):
    """The first exercise: a key that matches nothing is skipped with a warning, once per
    block, and the first forward pass stops at the layer left whole."""
    script = tmp_path / "typo.py"
    script.write_text(f"SNIPPET = {str(snippet(SNIPPET))!r}\n" + TYPO)
    result = run(script, launcher="torchrun", nproc=2, workdir=tmp_path)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["warnings"] == ["Parallelize plan key 'atention.wq' could not be resolved: "
                                 "no submodule matching token 'atention'"] * LAYERS, found
    assert found["wq"] == ["Parameter"] * LAYERS, found  # not split: a plain tensor
    assert found["error"] == (
        "RuntimeError: aten.addmm.default got mixed torch.Tensor and DTensor, need to convert "
        "all torch.Tensor to DTensor before calling distributed operators!"), found
