"""snippets/troubleshooting/gpu_placement.py, shown on docs/troubleshooting/startup.md.

On the CPU the script can only show that every process runs and reports; what it is
for, GPUs shared by mistake and checkpoints loaded onto the wrong GPU, needs GPUs.
"""

import pytest

from harness.launch import own_gpus, run
from harness.outputs import BARRIER_WARNING
from tests.devices import on_each_device

SNIPPET = "troubleshooting/gpu_placement.py"


def rows(stdout):
    return [line.split() for line in stdout.splitlines() if line[:4].strip().isdigit()]


@on_each_device(gpus=2)
def test_on_the_cpu_every_process_reports(tmp_path, device):
    """On GPUs: each process uses only its own GPU."""
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path)
    device.check_output(result)
    table = rows(result.stdout)
    if device.cuda:
        assert [r[1] for r in table] == ["cuda:0", "cuda:1"]
        assert [r[3] for r in table] == ["cuda:0", "cuda:1"]  # checkpoint on its own GPU
        assert table[1][4] == "0"  # rank 1 allocated nothing on GPU 0
    else:
        assert table == [["0", "cpu", "-", "cpu", "-"], ["1", "cpu", "-", "cpu", "-"]]
    assert result.stdout.splitlines()[-1] == "GPUs shared by several processes: none"
    # its barrier runs on the gloo group, and so needs no GPU: torch says nothing of it
    assert BARRIER_WARNING not in result.text


@pytest.mark.multigpu(2)
def test_torch_device_cuda_puts_every_process_on_gpu_0(tmp_path):
    result = run(SNIPPET, "--bug", "device", launcher="torchrun", nproc=2, workdir=tmp_path)
    assert [r[1] for r in rows(result.stdout)] == ["cuda", "cuda"]
    assert result.stdout.splitlines()[-1] == "GPUs shared by several processes: [[0, 1]]"


@pytest.mark.multigpu(2)
def test_loading_without_map_location_fills_gpu_0(tmp_path):
    result = run(SNIPPET, "--bug", "load", launcher="torchrun", nproc=2, workdir=tmp_path)
    table = rows(result.stdout)
    assert table[1][3] == "cuda:0"  # rank 1's copy of the checkpoint is on GPU 0
    assert float(table[1][4]) >= 4  # 4 MiB of rank 1's tensors on GPU 0


@pytest.mark.multigpu(1)
def test_one_visible_gpu_per_process_with_cuda_local_rank_fails_clearly(tmp_path):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, check=False,
                 env={"CUDA_VISIBLE_DEVICES": own_gpus(1)})
    assert result.returncode != 0
    assert (f"LOCAL_RANK=1 but this process sees 1 GPU(s) (CUDA_VISIBLE_DEVICES={own_gpus(1)})"
            in result.text)
