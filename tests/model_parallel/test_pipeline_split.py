"""snippets/model_parallel/pipeline_split.py, shown on docs/model_parallel/pipeline_split.md."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from harness.launch import run, snippet_code
from harness.outputs import GPU_ATOL
from tests.compare import load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL, assert_matches, printed_losses

SNIPPET = "model_parallel/pipeline_split.py"
RANKS = 2
#: What each of the 2 stages holds, as the page says: the embedding and the first half
#: of the layers, then the second half, the final norm and the head.
STAGES = [["embed", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "head"]]


def part(key):
    """'layers.0' for 'layers.0.up.weight', 'embed' for 'embed.weight'."""
    return ".".join(key.split(".")[:2 if key.startswith("layers.") else 1])


def stage_on_meta(code, stage, num_stages, **sizes):
    with torch.device("meta"):
        return code["keep_stage"](code["Transformer"](**sizes), stage, num_stages)


def one_process(code):
    """The whole model trained on the whole batch in one process: losses, first
    gradients, final weights."""
    model = code["build_model"]()
    x, y = code["make_batch"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=code["LR"])
    losses, first_grads = [], None
    for _ in range(code["STEPS"]):
        optimizer.zero_grad()
        loss = code["loss_fn"](model(x), y)
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "first_grads": first_grads, "model": model.state_dict()}


def stage_parts(code, num_stages):
    """The parts each stage holds, from the snippet's own split of the layers."""
    return [(["embed"] if s == 0 else [])
            + [f"layers.{i}" for i in code["layers_of"](s, num_stages)]
            + (["norm", "head"] if s == num_stages - 1 else [])
            for s in range(num_stages)]


def check_run(result, ranks, atol):
    """Training equals one process; each stage held, and loaded back, its own part."""
    code = snippet_code(SNIPPET)
    expected = one_process(code)
    saved = load(result.workdir / "pipeline_split.pt")
    assert_matches(saved, expected, atol)  # losses, first gradients, final weights
    assert printed_losses(result.stdout) == pytest.approx(expected["losses"], abs=atol)
    assert len(printed_losses(result.stdout)) == code["STEPS"]

    full = expected["model"]
    parts = stage_parts(code, ranks)
    if ranks == RANKS:
        assert parts == STAGES
    out = result.stdout
    for s in range(ranks):
        mine = [k for k in full if part(k) in parts[s]]
        others = [p for p in part_names(full) if p not in parts[s]]
        left_out = [k for k in full if k not in mine]
        nbytes = sum(full[k].nbytes for k in mine)
        assert (f"stage {s}: {', '.join(parts[s])}; {len(mine)} tensors; "
                f"0 bytes, {nbytes} after to_empty") in out
        assert f"rank {s} loads        {', '.join(parts[s])} ({len(mine)}), as trained: True" in out
        # what filtering leaves out of the whole checkpoint: the other stages', exactly
        assert f"rank {s} leaves out   {listed(others)} ({len(left_out)})" in out
        # strict=False calls unexpected only the deleted layers, not the parts set to None
        deleted = [p for p in others if p.startswith("layers.")]
        assert (f"rank {s} strict=False 0 missing, unexpected {listed(deleted)} "
                f"({sum(part(k) in deleted for k in full)})") in out
    assert f"saved pipeline_split.pt: the whole model, {len(full)} tensors" in out


def listed(names):
    return ", ".join(names) or "nothing"


def part_names(state):
    return list(dict.fromkeys(part(k) for k in state))


@on_each_device(gpus=RANKS, one_gpu=True)
def test_stages_built_on_meta_train_like_one_process(device, tmp_path):
    """On one GPU: one stage that holds the whole model and loads all of it back."""
    ranks = device.ranks(RANKS)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    check_run(result, ranks, device.pick(ATOL, GPU_ATOL))


def test_four_stages_train_like_one_process(tmp_path):
    """The first exercise's solution: 4 processes, one layer each."""
    result = run(SNIPPET, launcher="torchrun", nproc=4, workdir=tmp_path, timeout=240)
    check_run(result, 4, ATOL)
    assert "stage 1: layers.1; 6 tensors" in result.stdout


def test_deleting_from_a_module_list_renames_the_layers_after_it():
    """The second exercise: a ModuleList renumbers, a ModuleDict keeps the names."""
    blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(4))
    kept = blocks[2].weight
    del blocks[0], blocks[0]
    assert list(blocks.state_dict())[:2] == ["0.weight", "0.bias"]
    assert blocks[0].weight is kept  # layer 2, now named "0"
    named = nn.ModuleDict({str(i): nn.Linear(2, 2) for i in range(4)})
    del named["0"], named["1"]
    assert list(named.state_dict())[:2] == ["2.weight", "2.bias"]


@pytest.mark.parametrize("num_stages", [2, 4])
def test_each_stage_keeps_exactly_its_layers_under_the_whole_models_names(num_stages):
    code = snippet_code(SNIPPET)
    with torch.device("meta"):
        whole = list(code["Transformer"]().state_dict())
    held = []
    for s in range(num_stages):
        model = stage_on_meta(code, s, num_stages)
        names = list(model.state_dict())
        assert set(names) <= set(whole)  # the same names as in the whole model
        mine = {f"layers.{i}" for i in code["layers_of"](s, num_stages)}
        mine |= {"embed"} if s == 0 else set()
        mine |= {"norm", "head"} if s == num_stages - 1 else set()
        assert {part(k) for k in names} == mine
        assert [n for n, _ in model.named_parameters()] == names  # no buffers hide
        held += names
    assert sorted(held) == sorted(whole)  # every tensor on exactly one stage
    if num_stages == 2:
        assert [sorted({part(k) for k in code["keep_stage"](code["Transformer"](), s, 2)
                        .state_dict()}) for s in range(2)] == [sorted(p) for p in STAGES]


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_model_on_meta_takes_no_memory_until_to_empty():
    code = snippet_code(SNIPPET)
    # 4 layers of width 4096: 0.5 GiB of parameters if they were real
    sizes = {"vocab": 64, "dim": 4096, "layers": 4}
    before = resident_bytes()
    big = stage_on_meta(code, 0, 1, **sizes)
    grown = resident_bytes() - before
    real = sum(p.numel() * p.element_size() for p in big.parameters())
    assert real > 2 ** 29
    assert all(p.is_meta for p in big.parameters())
    assert code["stored_bytes"](big) == 0
    assert grown < 2 ** 25, grown  # < 32 MiB for 512 MiB of parameters
    # The measure sees a real model: the same on the CPU takes its size.
    before = resident_bytes()
    real_model = code["Transformer"](**sizes)
    assert resident_bytes() - before > real * 0.9
    assert code["stored_bytes"](real_model) == real
    del real_model
    # to_empty gives a stage memory for its own tensors only
    model = stage_on_meta(code, 1, 2)
    model.to_empty(device="cpu")
    assert code["stored_bytes"](model) == sum(t.nbytes for t in model.state_dict().values())
    assert not any(p.is_meta for p in model.parameters())


def test_per_name_seeds_give_a_stage_the_weights_of_one_process_and_one_seed_does_not():
    code = snippet_code(SNIPPET)
    whole = code["build_model"]().state_dict()
    stage = stage_on_meta(code, 1, 2).to_empty(device="cpu")
    stage.init_weights()
    for k, v in stage.state_dict().items():
        assert torch.equal(v, whole[k]), k
    # One seed for the model and PyTorch's own initialisation, layer after layer: the
    # second stage's first layer takes the numbers the embedding took in one process.
    torch.manual_seed(0)
    one = code["Transformer"]()
    torch.manual_seed(0)
    stage = stage_on_meta(code, 1, 2).to_empty(device="cpu")
    for module in stage.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    assert not torch.equal(stage.layers["2"].up.weight, one.layers["2"].up.weight)


def test_loading_the_whole_checkpoint_into_a_stage():
    """Filtering by the stage's own names and strict loading is right: strict=False
    lets a missing tensor through, and does not even name the parts set to None."""
    code = snippet_code(SNIPPET)
    checkpoint = code["build_model"]().state_dict()
    stage = stage_on_meta(code, 0, 2).to_empty(device="cpu")
    mine = stage.state_dict().keys()
    stage.load_state_dict({k: v for k, v in checkpoint.items() if k in mine})
    assert all(torch.equal(v, checkpoint[k]) for k, v in stage.state_dict().items())
    left_out = {k for k in checkpoint if k not in mine}
    assert {part(k) for k in left_out} == set(STAGES[1])
    with pytest.raises(RuntimeError, match="Unexpected key") as error:  # unfiltered
        stage.load_state_dict(checkpoint)
    assert "layers.2.up.weight" in str(error.value) and "head.weight" not in str(error.value)
    result = stage.load_state_dict(checkpoint, strict=False)
    assert result.missing_keys == []
    assert set(result.unexpected_keys) == {k for k in left_out if k.startswith("layers.")}
    # A checkpoint that lacks one of the stage's tensors:
    short = {k: v for k, v in checkpoint.items() if k != "layers.1.up.weight"}
    fresh = stage_on_meta(code, 0, 2).to_empty(device="cpu")
    assert fresh.load_state_dict(short, strict=False).missing_keys == ["layers.1.up.weight"]
    with pytest.raises(RuntimeError, match="Missing key.*layers.1.up.weight"):
        fresh.load_state_dict({k: v for k, v in short.items() if k in mine})


def test_return_outputs_false_keeps_no_outputs_on_the_last_stage():
    """The page's claim from schedules.py: by default step() keeps every micro-batch's
    output on the last stage and returns them joined; return_outputs=False keeps none."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    code = snippet_code(SNIPPET)
    x, y = code["make_batch"]()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        stage = PipelineStage(code["build_model"](), 0, 1, torch.device("cpu"))
        schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=code["loss_fn"])
        out = schedule.step(x, target=y)
        assert out.shape == (*x.shape, code["VOCAB"]) and len(stage.output_chunks) == 4
        assert schedule.step(x, target=y, return_outputs=False) is None
        assert stage.output_chunks == []
    finally:
        dist.destroy_process_group()

