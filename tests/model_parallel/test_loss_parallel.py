"""snippets/model_parallel/loss_parallel.py, shown on docs/model_parallel/loss_parallel.md."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from harness.launch import run, snippet, snippet_code
from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL

SNIPPET = "model_parallel/loss_parallel.py"
RUNS = ["one process", "gather logits", "loss parallel"]
BATCH, SEQ, VOCAB, DIM = 4, 8, 1024, 16
FLOAT = 4  # bytes


def one_process():
    """The unsplit model's loss and gradients, computed here, in this process."""
    code = snippet_code(SNIPPET)
    assert (code["VOCAB"], code["DIM"]) == (VOCAB, DIM)
    torch.manual_seed(0)
    model = code["Net"]()
    tokens, targets = code["make_batch"]()
    assert tokens.shape == (BATCH, SEQ)
    loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters()}


ROW = re.compile(rf"({'|'.join(RUNS)})(?:, rank (\d+))? +\(")


def table(stdout):
    """{(run, rank): [logits held, forward, backward]} from the table of collectives."""
    rows = {}
    for line in stdout.splitlines():
        if row := ROW.match(line):
            rows[row[1], int(row[2] or 0)] = [line[23:39].strip(), line[39:63].strip(),
                                              line[63:].strip()]
    return rows


@on_each_device(gpus=2, one_gpu=True)
def test_split_logits_give_the_loss_and_gradients_of_one_process(device, tmp_path):
    """On one GPU a mesh of one device: the logits are whole, yet loss_parallel() still
    runs its all-reduces (over one rank)."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    stdout = result.stdout
    assert (f"head.weight: full ({VOCAB}, {DIM}), on this rank ({VOCAB // ranks}, {DIM}), "
            "Shard(dim=0)") in stdout
    assert (f"logits: full ({BATCH}, {SEQ}, {VOCAB}), on this rank "
            f"({BATCH}, {SEQ}, {VOCAB // ranks}), Shard(dim=2)") in stdout

    tokens = BATCH * SEQ
    full_logits = f"({BATCH}, {SEQ}, {VOCAB})"
    # the backward pass of the head: its input's gradient, partial on each rank, is summed
    head_input_grad = f"all_reduce 1, {tokens * DIM * FLOAT} B" if ranks > 1 else "-"
    expected = {("one process", 0): [full_logits, "-", "-"]}
    for rank in range(ranks):
        expected["gather logits", rank] = [
            full_logits,
            # every rank receives the whole logits: batch x sequence x vocabulary floats
            f"all_gather 1, {tokens * VOCAB * FLOAT} B" if ranks > 1 else "-",
            head_input_grad]
        expected["loss parallel", rank] = [
            f"({BATCH}, {SEQ}, {VOCAB // ranks})",
            # the maximum, the sum of exponentials and the target's logit: one float per
            # token each, whatever the size of the vocabulary (even over one rank)
            f"all_reduce 3, {3 * tokens * FLOAT} B",
            head_input_grad]  # and nothing for the loss: its backward pass is local
    assert table(stdout) == expected

    atol = device.pick(ATOL, GPU_ATOL)  # on GPUs: the same maths in other kernels
    loss, grads = one_process()
    saved = load(result.workdir / "loss_parallel.pt")
    assert list(saved) == RUNS
    for name in RUNS:
        assert saved[name]["loss"] == pytest.approx(loss, abs=atol), name
        assert_same_state(saved[name]["grads"], grads, atol, what=f"{name}: ")
    printed = {name: (value, diff) for name, value, diff in LOSS_LINE.findall(stdout)}
    assert list(printed) == RUNS
    # the loss, and the largest difference from the gradients of one process
    for name, (value, diff) in printed.items():
        assert float(value) == pytest.approx(loss, abs=atol), name
        assert float(diff) == pytest.approx(max(
            (saved[name]["grads"][n] - saved["one process"]["grads"][n]).abs().max().item()
            for n in grads), rel=0.1, abs=1e-12), name
        assert float(diff) <= atol, name


LOSS_LINE = re.compile(rf"(?m)^({'|'.join(RUNS)}): loss ([\d.]+), "
                       r"largest gradient difference (\S+)$")

#: Run as 2 ranks: what the page says happens when loss_parallel() is misused.
MISUSE = """
import json
import runpy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

code = runpy.run_path(SNIPPET)


def split_logits(mesh):
    torch.manual_seed(0)
    model = parallelize_module(code["Net"](), mesh, {"head": code["PLANS"]["loss parallel"]})
    tokens, targets = code["make_batch"]()
    return model(tokens).flatten(0, 1), targets.flatten()


def error(call):
    try:
        call()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


dist.init_process_group("gloo")
try:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    found = {}
    logits, targets = split_logits(mesh)
    with loss_parallel():
        loss = F.cross_entropy(logits, targets)
    found["backward outside"] = error(loss.backward)
    logits, targets = split_logits(mesh)
    found["loss outside"] = error(lambda: F.cross_entropy(logits, targets))
    logits, targets = split_logits(mesh)
    with loss_parallel():
        found["label smoothing"] = error(
            lambda: F.cross_entropy(logits, targets, label_smoothing=0.1))
    # targets that differ between the ranks: rank 1 gets others
    logits, targets = split_logits(mesh)
    others = torch.randint(code["VOCAB"], targets.shape,
                           generator=torch.Generator().manual_seed(2))
    with loss_parallel():
        loss = F.cross_entropy(logits, others if dist.get_rank() else targets)
    full = logits.full_tensor().detach()
    found["different targets"] = {
        "loss": loss.full_tensor().item(),
        "rank 0's targets": F.cross_entropy(full, targets).item(),
        "rank 1's targets": F.cross_entropy(full, others).item()}
    if dist.get_rank() == 0:
        print(json.dumps(found))
finally:
    dist.destroy_process_group()
"""


def test_misuse_of_loss_parallel(tmp_path):
    """The first exercise's errors, label_smoothing, and targets that differ by rank."""
    script = tmp_path / "misuse.py"
    script.write_text(f"SNIPPET = {str(snippet(SNIPPET))!r}\n" + MISUSE)
    result = run(script, launcher="torchrun", nproc=2, workdir=tmp_path)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    mixed = ("got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to "
             "DTensor before calling distributed operators!")  # quoted in the solution
    assert found["backward outside"] == (
        f"RuntimeError: aten.nll_loss_backward.default {mixed}"), found
    assert found["loss outside"] == (
        f"RuntimeError: aten.nll_loss_forward.default {mixed}"), found
    # "does not support label_smoothing: the loss stops with an error"
    assert found["label smoothing"].endswith(mixed), found
    # no error, and a loss that is neither rank's
    different = found["different targets"]
    for whose in ("rank 0's targets", "rank 1's targets"):
        assert abs(different["loss"] - different[whose]) > 0.01, different
