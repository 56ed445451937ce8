"""Which samples each process gets per epoch, with and without sampler.set_epoch.

    python set_epoch.py

DistributedSampler needs no process group when it is told the number of
processes and the rank, so this runs as one plain process and plays both ranks.
"""

from torch.utils.data.distributed import DistributedSampler

dataset = range(12)  # anything with a length: the sampler only hands out indices
for call_set_epoch in (False, True):
    print("with sampler.set_epoch(epoch):" if call_set_epoch else "without set_epoch:")
    samplers = [DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True,
                                   seed=0)
                for rank in (0, 1)]
    for epoch in range(3):
        if call_set_epoch:
            for sampler in samplers:
                sampler.set_epoch(epoch)  # in every process, before iterating
        shares = "   ".join(f"rank {rank} gets {list(sampler)}"
                            for rank, sampler in enumerate(samplers))
        print(f"  epoch {epoch}: {shares}")
