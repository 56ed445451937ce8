"""snippets/basics/dataparallel.py, shown on docs/basics/dataparallel.md."""

import runpy

import torch

from harness.launch import own_gpus, run, snippet
from tests.compare import assert_same_state, load
from tests.devices import on_each_device

SNIPPET = "basics/dataparallel.py"


def trained_without_dataparallel(device):
    """The snippet's own model, data and loop, on one device without DataParallel."""
    code = runpy.run_path(str(snippet(SNIPPET)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the run (OMP_NUM_THREADS=1): sums in the same order
    try:
        torch.manual_seed(0)
        net = code["Net"]().to(device)
        x, y = code["make_data"](device)
        code["train"](net, x, y)
    finally:
        torch.set_num_threads(threads)
    return net.state_dict()


def assert_checkpoint_matches(path, device, atol):
    state = load(path)
    assert not any(key.startswith("module.") for key in state), list(state)
    expected = trained_without_dataparallel(device)
    assert_same_state(state, {key: value.cpu() for key, value in expected.items()}, atol)


@on_each_device(gpus=2, one_gpu=True)
def test_on_cpu_dataparallel_calls_the_model_unchanged(tmp_path, device):
    """On two GPUs the batch is split, and the results match one GPU's within 1e-5; on
    one GPU DataParallel calls the model on cuda:0 with the whole batch."""
    gpus = device.ranks(2) if device.cuda else 0
    env = {"CUDA_VISIBLE_DEVICES": own_gpus(gpus)} if device.cuda else None
    result = run(SNIPPET, workdir=tmp_path, env=env)
    device.check_output(result)
    assert f"GPUs used: {gpus}" in result.stdout
    if device.cuda:
        assert "parameters live on: cuda:0" in result.stdout
    split = ", ".join(f"{256 // gpus} rows on cuda:{i}" for i in range(gpus))
    assert device.pick("256 rows on cpu", split) in result.stdout
    assert_checkpoint_matches(tmp_path / "dataparallel.pt", device.pick("cpu", "cuda:0"),
                              atol=device.pick(0, 1e-5))
