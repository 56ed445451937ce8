"""snippets/model_parallel/clip_pipeline.py, shown on docs/model_parallel/clipping.md."""

import re

import pytest
import torch
from torch import nn

from harness.launch import run, snippet_code
from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.model_parallel.reference import ATOL

SNIPPET = "model_parallel/clip_pipeline.py"
RUNS = ["one process", "global norm", "per stage"]
#: Stages that clip alone end this far from one process at least (100 x ATOL): the
#: page says their training differs.
MARGIN = 1e-3


def clipped_in_one_process():
    """The whole model trained here with clip_grad_norm_: losses, norms, weights."""
    code = snippet_code(SNIPPET)
    model = code["build_model"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = code["make_batch"]()
    losses, norms = [], []
    for _ in range(code["STEPS"]):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), code["MAX_NORM"])
        assert norm > code["MAX_NORM"]  # "so that every step clips"
        optimizer.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return {"losses": losses, "norms": norms, "model": model.state_dict()}


LINE = re.compile(rf"(?m)^({'|'.join(RUNS)}) +step (\d+): loss ([\d.]+), "
                  r"(?:stages )?clipped by ([\d., ]+)$")
DIFF = re.compile(r"(?m)^(global norm|per stage): largest weight difference from one "
                  r"process (\S+)$")


@on_each_device(gpus=2)
def test_stages_clip_by_the_norm_of_the_whole_model(device, tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, env=device.env())
    device.assert_ran(2, result=result)
    device.check_output(result)
    atol = device.pick(ATOL, GPU_ATOL)
    reference = clipped_in_one_process()
    steps = len(reference["losses"])
    saved = load(tmp_path / "clip_pipeline.pt")
    assert list(saved) == RUNS

    # One process in the script, and the pipeline that clips by the global norm, train as
    # one process does here: the same losses, the same norms on both stages, the same weights.
    for name in ("one process", "global norm"):
        run_ = saved[name]
        assert run_["losses"] == pytest.approx(reference["losses"], abs=atol), name
        for step, norms in enumerate(run_["norms"]):
            assert norms == pytest.approx([reference["norms"][step]] * len(norms),
                                          abs=atol), (name, step)
        assert_same_state(run_["model"], reference["model"], atol, what=f"{name}: ")

    # Stages that clip alone: each by a smaller norm, its own; at the first step (same
    # gradients as one process) their squares add up to the square of the true norm.
    alone = saved["per stage"]
    first = alone["norms"][0]
    assert len(first) == 2
    assert all(n < reference["norms"][0] - 0.01 for n in first), first
    assert sum(n * n for n in first) == pytest.approx(reference["norms"][0] ** 2, abs=atol)
    assert alone["losses"][0] == pytest.approx(reference["losses"][0], abs=atol)
    differences = [(alone["model"][k] - v).abs().max().item()
                   for k, v in reference["model"].items()]
    assert max(differences) > MARGIN, differences
    assert abs(alone["losses"][-1] - reference["losses"][-1]) > atol

    # What the script printed is what it saved.
    printed = {(name, int(step)): (float(loss), [float(n) for n in used.split(", ")])
               for name, step, loss, used in LINE.findall(result.stdout)}
    assert sorted(printed) == sorted((name, s) for name in RUNS for s in range(steps))
    for (name, step), (loss, used) in printed.items():
        assert loss == pytest.approx(saved[name]["losses"][step], abs=1e-6)
        assert used == pytest.approx(saved[name]["norms"][step], abs=1e-6)
    diffs = dict(DIFF.findall(result.stdout))
    assert float(diffs["global norm"]) <= atol
    assert float(diffs["per stage"]) == pytest.approx(max(differences), rel=0.1)
