"""Checks of what the chapter's exercises claim, which need DDP but only one rank.

The tests run this file once, as one rank (the `env` launcher), so that the test process
itself never holds a process group; it prints one JSON object with every check's result.
"""

import contextlib
import json
import runpy
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

SNIPPETS = Path(__file__).resolve().parents[2] / "snippets" / "performance"


def snippet(name):
    return runpy.run_path(str(SNIPPETS / name))


def channels_last_after_wrapping():
    """Warnings DDP gives when the model is converted to channels_last after wrapping."""
    model = snippet("channels_last.py")["make_model"]()
    ddp = DDP(model)
    model.to(memory_format=torch.channels_last)  # too late
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
        ddp(x).sum().backward()
    return [str(w.message) for w in caught]


def no_sync_placement(accumulate=4):
    """All-reduces per window when no_sync() covers nothing, both passes, or backward only."""
    code = snippet("no_sync.py")
    counts = {}
    for where in ("nowhere", "forward and backward", "backward only"):
        model = DDP(code["make_model"]())
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(state=counter, hook=code["counting_allreduce"])
        for i in range(accumulate):
            last = i == accumulate - 1
            skip = contextlib.nullcontext() if last else model.no_sync()
            x = torch.randn(8, 32)
            if where == "forward and backward":
                with skip:
                    model(x).sum().backward()
            else:
                out = model(x)
                with skip if where == "backward only" else contextlib.nullcontext():
                    out.sum().backward()
        counts[where] = counter["calls"]
    return counts


def buckets_at_half_a_mebibyte():
    """All-reduces in the first and the last of 3 steps with bucket_cap_mb=0.5."""
    _, per_step = snippet("ddp_knobs.py")["steps"](torch.device("cpu"), bucket_cap_mb=0.5)
    return [len(per_step[0]), len(per_step[-1])]


def compiled_state_dict_keys():
    """State-dict keys of DDP(torch.compile(net)), of the compiled module, and of net."""
    net = snippet("compile_ddp.py")["make_model"]()
    model = DDP(torch.compile(net, backend="aot_eager"))
    return {
        "ddp": list(model.state_dict()),
        "compiled": list(model.module._orig_mod.state_dict()),
        "net": list(net.state_dict()),
    }


CHECKS = [
    channels_last_after_wrapping,
    no_sync_placement,
    buckets_at_half_a_mebibyte,
    compiled_state_dict_keys,
]


def main():
    dist.init_process_group("gloo")
    try:
        print(json.dumps({check.__name__: check() for check in CHECKS}))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
