"""snippets/model_parallel/clip_2d.py, shown on docs/model_parallel/clipping.md."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from harness.launch import run, snippet, snippet_code
from harness.outputs import GPU_ATOL, check_text
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL

SNIPPET = "model_parallel/clip_2d.py"


def clipped_in_one_process():
    """The unsplit Net trained here on all 8 sequences with clip_grad_norm_: losses, the
    norms before clipping (all, tensor-parallel parameters, the others), weights."""
    code = snippet_code(SNIPPET)
    torch.manual_seed(0)
    model = code["Net"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = code["make_batch"]()
    split = tuple(code["TP_PLAN"])  # the modules tensor parallelism cuts
    losses, norms = [], []
    for _ in range(code["STEPS"]):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        cut = [p.grad for n, p in model.named_parameters() if n.startswith(split)]
        whole = [p.grad for n, p in model.named_parameters() if not n.startswith(split)]
        parts = [torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
                 for grads in (whole, cut)]
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), code["MAX_NORM"])
        assert norm > code["MAX_NORM"]  # "so that every step clips"
        optimizer.step()
        losses.append(loss.item())
        norms.append((norm.item(), *(p.item() for p in parts)))
    return {"losses": losses, "norms": norms, "model": model.state_dict(),
            "counts": (len(whole), len(cut))}


STEP = re.compile(r"(?m)^step (\d+): loss ([\d.]+), norm ([\d.]+) "
                  r"\(\('dp',\) ([\d.]+), \('dp', 'tp'\) ([\d.]+)\)$")


@on_each_device(gpus=4)
def test_norm_of_all_meshes_gives_the_training_of_one_process(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=4, workdir=tmp_path, env=device.env())
    device.assert_ran(4, result=result)
    device.check_output(result)
    atol = device.pick(ATOL, GPU_ATOL)
    reference = clipped_in_one_process()
    only_dp, with_tp = reference["counts"]
    # FSDP alone: the embedding, the layer norms, the head; FSDP and TP: the plan's linears
    assert f"{only_dp:2} parameters on mesh ('dp',): norm DTensor (Replicate(),)" in result.stdout
    assert (f"{with_tp} parameters on mesh ('dp', 'tp'): norm DTensor "
            "(Replicate(), Replicate())") in result.stdout

    printed = [tuple(map(float, row)) for row in STEP.findall(result.stdout)]
    assert [int(row[0]) for row in printed] == list(range(len(reference["losses"])))
    for row, loss, norms in zip(printed, reference["losses"], reference["norms"]):
        assert row[1] == pytest.approx(loss, abs=atol)
        # the norm of the whole model, and of the parameters on each mesh
        assert row[2:] == pytest.approx(norms, abs=atol)
        assert row[2] ** 2 == pytest.approx(row[3] ** 2 + row[4] ** 2, abs=1e-5)

    saved = load(tmp_path / "clip_2d.pt")
    assert saved["losses"] == pytest.approx(reference["losses"], abs=atol)
    assert saved["norms"] == pytest.approx([n[0] for n in reference["norms"]], abs=atol)
    assert_same_state(saved["model"], reference["model"], atol)


#: The error of clip_grad_norm_ on parameters of two meshes (torch 2.13), as the page shows.
SAME_MESH = re.compile(r"RuntimeError: All operands in aten\.stack\.default must have the "
                       r"same mesh, but got .*")


def test_clip_grad_norm_on_two_meshes_stops(tmp_path):
    result = run(SNIPPET, "--plain", launcher="torchrun", nproc=4, workdir=tmp_path,
                 check=False)
    assert result.returncode != 0
    errors = SAME_MESH.findall(result.text)
    assert errors, result.report()
    assert not (tmp_path / "clip_2d.pt").exists()
    check_text(errors[0].strip() + "\n", SNIPPET, "plain", command=result.command)


#: Run as 4 ranks: how get_total_norm reaches the norm of DTensor gradients (the page's
#: "How the norm is reduced").
PROBE = """
import json
import runpy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import parallelize_module

code = runpy.run_path(SNIPPET)
dist.init_process_group("gloo")
try:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = code["Net"]()
    parallelize_module(model, mesh["tp"], code["TP_PLAN"])
    fully_shard(model.block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    x, y = code["make_batch"]()
    dp = mesh["dp"].get_local_rank()
    F.mse_loss(model(x[dp * 4:dp * 4 + 4]), y[dp * 4:dp * 4 + 4]).backward()
    found = {}
    for m, params in code["by_mesh"](model.parameters()).items():
        grads = [p.grad for p in params]
        with CommDebugMode() as each:
            norms = torch._foreach_norm(grads, 2.0)  # what get_total_norm computes first
        with CommDebugMode() as total:
            norm = torch.nn.utils.get_total_norm(grads)
        with CommDebugMode() as value:
            norm.full_tensor()
        found[str(m.mesh_dim_names)] = {
            # 2.10 writes _NormPartial(reduce_op=sum, norm_type=2.0), 2.13 _NormPartial(2.0)
            "each": sorted({str(n.placements).replace("reduce_op=sum, norm_type=", "")
                            for n in norms}),
            "each comms": each.get_total_counts(),
            "total": str(norm.placements),
            "total comms": {str(k): v for k, v in total.get_comm_counts().items()},
            "full_tensor comms": value.get_total_counts()}
    if dist.get_rank() == 0:
        print(json.dumps(found))
finally:
    dist.destroy_process_group()
"""


def test_how_get_total_norm_reduces_dtensor_norms(tmp_path):
    """Each gradient's norm is a partial DTensor; get_total_norm all-reduces once per
    dimension of the mesh and returns a replicated DTensor; full_tensor() sends nothing."""
    script = tmp_path / "probe.py"
    script.write_text(f"SNIPPET = {str(snippet(SNIPPET))!r}\n" + PROBE)
    result = run(script, launcher="torchrun", nproc=4, workdir=tmp_path)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    dp, both = found["('dp',)"], found["('dp', 'tp')"]
    assert dp["each"] == ["(_NormPartial(2.0),)"], dp
    # a tensor-parallel bias is whole on each rank of a row: Replicate along "tp"
    assert both["each"] == ["(_NormPartial(2.0), Replicate())",
                            "(_NormPartial(2.0), _NormPartial(2.0))"], both
    assert dp["each comms"] == both["each comms"] == 0
    assert dp["total"] == "(Replicate(),)"
    assert both["total"] == "(Replicate(), Replicate())"
    assert dp["total comms"] == {"c10d_functional.all_reduce": 1}, dp
    assert both["total comms"] == {"c10d_functional.all_reduce": 2}, both
    assert dp["full_tensor comms"] == both["full_tensor comms"] == 0
