"""snippets/model_parallel/naive.py, shown on docs/model_parallel/naive.md."""

import pytest
import torch
from torch import nn

from harness.launch import own_gpus, run, snippet
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.model_parallel.reference import printed_losses, snippet_code

SNIPPET = "model_parallel/naive.py"
COPY = "        x = x.to(self.dev1)  # copy the activations to the second device\n"


def unsplit_reference():
    """The same layers, initialised alike, as one nn.Sequential on the CPU, trained the same way."""
    code = snippet_code(SNIPPET)
    torch.manual_seed(0)
    halves = code["TwoDeviceNet"](torch.device("cpu"), torch.device("cpu"))
    whole = nn.Sequential(*halves.first, *halves.second)  # the layers, not the forward with copies
    x, y = code["make_data"]()
    losses = code["train"](whole, x, y)
    names = [f"first.{k}" for k in halves.first.state_dict()] + \
            [f"second.{k}" for k in halves.second.state_dict()]
    return losses, dict(zip(names, whole.state_dict().values()))


def assert_matches_unsplit(result, atol):
    losses, weights = unsplit_reference()
    assert printed_losses(result.stdout) == pytest.approx(losses, abs=1e-6 + atol)
    assert_same_state(load(result.workdir / "naive.pt"), weights, atol)


def without_the_copy():
    """The snippet's source with the line that moves the activations to the second device deleted."""
    source = snippet(SNIPPET).read_text()
    assert COPY in source
    return source.replace(COPY, "")


@on_each_device(gpus=2)
def test_on_cpu_it_trains_like_the_unsplit_model_and_cannot_see_a_missing_copy(
        device, tmp_path, monkeypatch, capsys):
    """On GPUs the activations move from one GPU to the other, and a missing copy fails."""
    env = {"CUDA_VISIBLE_DEVICES": own_gpus(2)} if device.cuda else None
    result = run(SNIPPET, workdir=tmp_path, env=env)
    device.check_output(result)
    assert result.stdout.startswith(device.pick("first half on cpu, second half on cpu",
                                                "first half on cuda:0, second half on cuda:1"))
    if device.cuda:
        assert "first half output: cuda:0\nsecond half input: cuda:1\n" in result.stdout
    assert_matches_unsplit(result, atol=device.pick(0, 1e-5))
    if not device.cuda:
        # Both halves are on the CPU: forgetting the .to() changes nothing, so only GPUs can test it.
        monkeypatch.chdir(tmp_path)
        capsys.readouterr()
        exec(compile(without_the_copy(), "naive.py", "exec"), {"__name__": "__main__"})
        assert capsys.readouterr().out == result.stdout
    else:
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "naive.py").write_text(without_the_copy())
        broken = run(tmp_path / "broken" / "naive.py", workdir=tmp_path / "broken", env=env,
                     check=False)
        assert broken.returncode != 0
        assert "Expected all tensors to be on the same device" in broken.text
