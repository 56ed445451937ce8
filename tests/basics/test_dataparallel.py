"""snippets/basics/dataparallel.py, shown on docs/basics/dataparallel.md."""

import runpy

import pytest
import torch

from harness.launch import own_gpus, run, snippet
from harness.outputs import check_output
from tests.compare import assert_same_state, load

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


def test_on_cpu_dataparallel_calls_the_model_unchanged(tmp_path):
    result = run(SNIPPET, workdir=tmp_path)
    check_output(result)
    assert "GPUs used: 0" in result.stdout
    assert "256 rows on cpu" in result.stdout
    assert_checkpoint_matches(tmp_path / "dataparallel.pt", "cpu", atol=0)


@pytest.mark.multigpu(2)
def test_on_two_gpus_the_batch_is_split_and_results_match_one_gpu(tmp_path):
    result = run(SNIPPET, workdir=tmp_path, env={"CUDA_VISIBLE_DEVICES": own_gpus(2)})
    assert "GPUs used: 2" in result.stdout
    assert "parameters live on: cuda:0" in result.stdout
    assert "128 rows on cuda:0, 128 rows on cuda:1" in result.stdout
    assert_checkpoint_matches(tmp_path / "dataparallel.pt", "cuda:0", atol=1e-5)
