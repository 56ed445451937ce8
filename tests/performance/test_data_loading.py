"""snippets/performance/data_loading.py, shown on docs/performance/data_loading.md."""

import os
import re

from torch.utils.data.distributed import DistributedSampler

from harness.launch import run
from tests.devices import on_each_device

SNIPPET = "performance/data_loading.py"
RANKS, SAMPLES = 2, 128


def check_run(stdout, ranks=RANKS):
    assert f"{ranks} processes, {SAMPLES // ranks} of {SAMPLES} samples each" in stdout
    # Each rank's shard is what DistributedSampler gives for its rank and epoch, and together
    # the shards hold every sample once.
    for epoch in range(2):
        shards = []
        for rank in range(ranks):
            sampler = DistributedSampler(range(SAMPLES), num_replicas=ranks, rank=rank, seed=0)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
            assert (
                f"epoch {epoch}, rank {rank}: {SAMPLES // ranks} samples, first {shards[-1][:6]}"
                in stdout
            )
        assert f"epoch {epoch}, rank {ranks}:" not in stdout
        assert sorted(sum(shards, [])) == list(range(SAMPLES))
        assert f"epoch {epoch}: every sample exactly once: True" in stdout
    rates = {int(w): float(r) for w, r in re.findall(r"^ +(\d+) +(\d+) samples/s$", stdout, re.M)}
    assert list(rates) == [0, 1, 2, 4]
    assert rates[4] > 1.5 * max(rates[0], rates[1])  # 4 workers wait at the same time
    first = dict(
        re.findall(r"persistent_workers=(\w+): first batch of epoch 2 after (\d+) ms", stdout)
    )
    assert int(first["True"]) < int(first["False"])  # no workers to start again


@on_each_device(gpus=RANKS, one_gpu=True)
def test_shards_and_throughput_on_cpu(device):
    """On GPUs, with pinned memory; at world size 1 the one shard is every sample."""
    ranks = device.ranks(RANKS)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    assert device.pick("CPU-only figures", "\nGPU figures, ") in result.stdout
    check_run(result.stdout, ranks)
    if not device.cuda and len(os.sched_getaffinity(0)) < 4:
        # PyTorch warns when workers outnumber the CPUs
        assert "This DataLoader will create 4 worker processes in total" in result.text
