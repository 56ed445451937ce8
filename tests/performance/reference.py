"""One-process, full-batch float32 training of a snippet's model: what DDP must reproduce.

With ``DistributedSampler(seed=0)`` the batches of N processes at one step are, together,
the batch that one process sees with N times the batch size and ``num_replicas=1``; the
averaged gradients are therefore the full-batch gradients, and the trained weights match.
"""

from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from harness.launch import snippet_code


def full_batch_reference(path, *, loss_fn, make_optimizer, batch_size, epochs, skipped_steps=0):
    """Train the snippet's ``make_model()`` on its ``make_dataset()``; return the state dict.

    The first ``skipped_steps`` optimiser steps are left out, as a gradient scaler does when
    it finds inf or NaN gradients.
    """
    code = snippet_code(path)
    model, dataset = code["make_model"](), code["make_dataset"]()
    optimizer = make_optimizer(model.parameters())
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=0)
    step = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(dataset, batch_size=batch_size, sampler=sampler):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            if step >= skipped_steps:
                optimizer.step()
            step += 1
    return model.state_dict()
