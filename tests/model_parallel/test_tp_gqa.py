"""snippets/model_parallel/tp_gqa.py, shown on docs/model_parallel/tensor_parallel_practice.md."""

import json
import re

import pytest
import torch

from harness.launch import run, snippet, snippet_code
from tests.compare import load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL, assert_matches, one_process

SNIPPET = "model_parallel/tp_gqa.py"
SPLIT, WHOLE, NOT_SUMMED = "2 KV heads, split", "1 KV head, whole", "1 KV head, whole, not summed"


def trained_in_one_process(kv_heads):
    code = snippet_code(SNIPPET)
    torch.manual_seed(0)
    return one_process(code["Net"](kv_heads), *code["make_batch"](), steps=code["STEPS"])


def table(stdout):
    """{run: [forward, backward]} from the table of collectives."""
    rows = {}
    for line in stdout.splitlines():
        for name in (NOT_SUMMED, WHOLE, SPLIT):
            if line.startswith(name + " "):
                rows[name] = [line[30:46].strip(), line[46:62].strip()]
                break
    return rows


@on_each_device(gpus=2, one_gpu=True)
def test_grouped_query_attention_trains_as_in_one_process(device, tmp_path):
    """On one GPU a mesh of one device: 2 KV heads and 1 both divide among 1 rank, so
    wk and wv are split (into one piece) in every run."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    out = " ".join(result.stdout.split())
    # what each rank holds: wq split by rows, wo by columns, wk/wv split or whole
    assert f"wq.weight on this rank ({16 // ranks}, 16) Shard(dim=0)" in out
    assert f"wo.weight on this rank (16, {16 // ranks}) Shard(dim=1)" in out
    assert f"wk.weight on this rank ({8 // ranks}, 16) Shard(dim=0)" in out
    if ranks == 2:
        assert "wk.weight on this rank (4, 16) whole" in out
        assert "wv.weight on this rank (4, 16) whole" in out
        heads = re.findall(r"rank (\d): query heads (\[[\d, ]+\]), key/value heads (\[[\d, ]+\])",
                           result.stdout)
        assert [(int(r), json.loads(q), json.loads(kv)) for r, q, kv in heads] == [
            (0, [0, 1], [0]), (1, [2, 3], [1]),  # split: each rank its own KV head
            (0, [0, 1], [0]), (1, [2, 3], [0])]  # whole: both ranks use KV head 0
        assert table(result.stdout) == {
            # forward: wo's partial outputs summed; backward: the input gradient of
            # wq, wk, wv (split), or of wq and of k and v (whole, summed)
            SPLIT: ["all_reduce 1", "all_reduce 3"],
            WHOLE: ["all_reduce 1", "all_reduce 3"],
            NOT_SUMMED: ["all_reduce 1", "all_reduce 1"]}

    atol = device.pick(ATOL, 1e-4)
    saved = load(result.workdir / "tp_gqa.pt")
    assert list(saved) == [SPLIT, WHOLE, NOT_SUMMED]
    assert_matches(saved[SPLIT], trained_in_one_process(2), atol)
    one = trained_in_one_process(1)
    assert_matches(saved[WHOLE], one, atol)
    if ranks == 2:
        # without the sum, rank 0 has only its own query heads' part of these gradients
        grads = saved[NOT_SUMMED]["first_grads"]
        for name in ("attn.wk.weight", "attn.wv.weight", "embed.weight"):
            assert (grads[name] - one["first_grads"][name]).abs().max() > 1e-3, name
        for name in ("attn.wq.weight", "attn.wo.weight", "head.weight"):
            torch.testing.assert_close(grads[name], one["first_grads"][name], rtol=0, atol=atol)


#: Run as 2 ranks: the first exercise's answer. wk and wv whole, nothing summed in the
#: forward pass; after backward() only the gradients of wk and wv are summed.
WEIGHTS_ONLY = """
import json, runpy, time
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

code = runpy.run_path(SNIPPET)
dist.init_process_group("gloo")
try:
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = code["Net"](1)
    code["parallelize"](model, mesh, 1, sum_kv_gradients=False)
    x, y = code["make_batch"]()
    F.mse_loss(model(x), y).backward()
    for p in (*model.attn.wk.parameters(), *model.attn.wv.parameters()):
        dist.all_reduce(p.grad)
    grads = {n: p.grad.full_tensor().tolist() if hasattr(p.grad, "full_tensor")
             else p.grad.tolist() for n, p in model.named_parameters()}  # on every rank
    if dist.get_rank() == 0:
        print(json.dumps(grads))
finally:
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
"""


def test_summing_only_the_weight_gradients_leaves_the_input_gradient_wrong(tmp_path):
    script = tmp_path / "weights_only.py"
    script.write_text(f"SNIPPET = {str(snippet(SNIPPET))!r}\n" + WEIGHTS_ONLY)
    result = run(script, launcher="torchrun", nproc=2, workdir=tmp_path)
    grads = {n: torch.tensor(g) for n, g in
             json.loads(result.stdout.strip().splitlines()[-1]).items()}
    expected = trained_in_one_process(1)["first_grads"]
    for name in ("attn.wk.weight", "attn.wv.weight", "attn.wq.weight", "head.weight"):
        torch.testing.assert_close(grads[name], expected[name], rtol=0, atol=ATOL)
    # what reaches the layer before attention is still a part, not the whole
    assert (grads["embed.weight"] - expected["embed.weight"]).abs().max() > 1e-3
