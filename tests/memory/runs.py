"""Runs of the memory chapter's snippets, shared by its tests and by tests/tools.

Each run happens at most once per test session (the functions are cached): the
same launch proves a page's claims and feeds the estimator's measured-versus-
estimated table. Also here: the one-process, full-batch reference training that
every distributed run must reproduce, and parsers for the tables the snippets print.
"""

import importlib.util
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from harness.launch import run, shared, snippet, snippet_code
from harness.outputs import GPU_ATOL  # noqa: F401 (the chapter's tests import it from here)
from tests.compare import assert_same_state, load
from tests.on_gpus import NcclLogs

HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(
    not HAVE_DEEPSPEED, reason="needs DeepSpeed: pip install deepspeed==0.19.8")
DS_CONFIGS = ["ds_config_zero1.json", "ds_config_zero2.json", "ds_config_zero3.json",
              "ds_config_zero2_offload.json", "ds_config_zero3_offload.json"]
#: The first DeepSpeed run on a machine compiles an operator for the CPU (about a minute;
#: `make` does it when it installs, and caches it in ~/.cache/torch_extensions).
DS_TIMEOUT = 900
#: How the suite runs fsdp2.py: ranks -> options.
FSDP2_RUNS = {1: ("--bf16",), 2: (), 4: ("--offload",)}


def workdir():
    return Path(tempfile.mkdtemp(prefix="memory-"))


@shared
def torchrun(name, nproc, *args):
    """``torchrun --standalone --nproc_per_node=N <snippet> args`` in a fresh folder."""
    return run(name, *args, launcher="torchrun", nproc=nproc, workdir=workdir())


@shared
def torchrun_on(device, name, nproc, *args):
    """:func:`torchrun` on the device: on the CPU the same run; on GPUs over NCCL, in as
    many processes (its logs show it)."""
    if not device.cuda:
        return torchrun(name, nproc, *args)
    result = run(name, *args, launcher="torchrun", nproc=nproc, workdir=workdir(),
                 env=device.env(name))
    device.assert_ran(nproc, name, result)
    return result


def with_ds_configs(folder):
    """The folder, with the config files in it, as a reader has them beside the script."""
    for config in DS_CONFIGS:
        shutil.copy(snippet(f"memory/{config}"), folder)
    return folder


@shared
def deepspeed_run(nproc):
    """deepspeed_zero.py with every config: ``deepspeed`` at 2 ranks, torchrun at 1 and 4."""
    folder = with_ds_configs(workdir())
    if nproc == 2:  # the deepspeed launcher; it starts the ranks with --local_rank=N
        return run("memory/deepspeed_zero.py", *DS_CONFIGS, launcher="deepspeed", nproc=nproc,
                   workdir=folder, timeout=DS_TIMEOUT)
    return run("memory/deepspeed_zero.py", *DS_CONFIGS, launcher="torchrun", nproc=nproc,
               workdir=folder, timeout=DS_TIMEOUT)


@shared
def deepspeed_gpu_run(nproc: int = 2):
    """deepspeed_zero.py with every config under torchrun on ``nproc`` GPUs, over NCCL
    (its logs show it)."""
    logs = NcclLogs()
    result = run("memory/deepspeed_zero.py", *DS_CONFIGS, launcher="torchrun", nproc=nproc,
                 workdir=with_ds_configs(workdir()), timeout=DS_TIMEOUT, env=logs.env)
    logs.assert_nccl_ran(nproc)
    return result


@shared
def dcp_runs():
    """2 ranks train 2 epochs; 4 ranks resume from that checkpoint to 4; one process converts."""
    folder = workdir()
    first = run("memory/dcp_checkpoint.py", "--epochs", "2", launcher="torchrun", nproc=2,
                workdir=folder)
    resumed = run("memory/dcp_checkpoint.py", "--epochs", "4", launcher="torchrun", nproc=4,
                  workdir=folder)
    converted = run("memory/dcp_to_torch.py", "checkpoints/epoch_4", "model.pt", workdir=folder)
    return SimpleNamespace(first=first, resumed=resumed, converted=converted, folder=folder)


@shared
def _reference(name, epochs, clip):
    c = snippet_code(name)
    dataset = c["make_dataset"]()
    torch.manual_seed(0)
    model = c["Net"]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # The order the ranks see together: one replica with the same seed, the whole batch.
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reference(name, epochs=3, clip=None):
    """Weights after training the snippet's model in one process on the full batch."""
    return _reference(name, epochs, clip)


def assert_same_weights(state, expected, atol=1e-5):
    """The weights of a run equal the reference's within ``atol``, read as float32 on the CPU."""
    assert_same_state({key: value.float().cpu() for key, value in state.items()}, expected, atol)


def saved(result, filename):
    return load(result.workdir / filename)


NUMBER = r"(\d+(?:\.\d+)?)"


def held_table(text, label=r""):
    """Rows ``[label] rank parameters gradients optimiser`` of a printed table, as KiB floats.

    Returns {label: [(parameters, gradients, optimiser state) for each rank]}.
    """
    rows = {}
    pattern = re.compile(rf"^\s*({label})\s*(\d+) +{NUMBER} +{NUMBER} +{NUMBER}\s*$")
    for line in text.splitlines():
        if m := pattern.match(line):
            rows.setdefault(m[1], []).append(tuple(float(v) * 1024 for v in m.group(3, 4, 5)))
    return rows


PARAMETERS = 132_929  # of the Net in every snippet of the chapter


def assert_ds_config_holds(config, params, grads, optimiser, runs=None):
    """Each rank of every run of ``config`` holds these bytes per parameter (functions of N).
    ``runs``: {N: result}, by default the runs on the CPU with 1, 2 and 4 ranks."""
    for n, result in (runs or {n: deepspeed_run(n) for n in (1, 2, 4)}).items():
        rows = deepspeed_tables(result.stdout)[config]
        assert len(rows) == n
        for held in rows:
            expected = [f(n) * PARAMETERS for f in (params, grads, optimiser)]
            assert held == pytest.approx(expected, rel=0.01), (config, n)


def deepspeed_tables(text):
    """{config file: [(parameters, gradients, optimiser state) per rank]} from deepspeed_zero.py."""
    tables = {}
    for block in re.split(r"^(?=ds_config_\w+\.json:)", text, flags=re.M)[1:]:
        config = block.split(":")[0]
        tables[config] = held_table(block)[""]
    return tables
