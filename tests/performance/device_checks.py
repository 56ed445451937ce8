"""Checks, on a machine without GPUs, of what the chapter's snippets do on GPUs.

Snippets are loaded as modules (their ``main()`` does not run) and the CUDA or
torch.distributed call they make is replaced by a recorder, so the check needs no GPU.
"""

import torch

def check_barrier_names_the_gpu(code, monkeypatch):
    """The snippet's ``barrier(device)`` passes the GPU's index to dist.barrier, and on
    the CPU calls it as before (``device_ids=None``, its default)."""
    calls = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda **kwargs: calls.append(kwargs))
    code["barrier"](torch.device("cuda", 1))
    code["barrier"](torch.device("cpu"))
    assert calls == [{"device_ids": [1]}, {"device_ids": None}]
