"""snippets/performance/no_sync.py, shown on docs/performance/no_sync.md."""

import torch

from harness.launch import run
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.performance.reference import full_batch_reference

SNIPPET = "performance/no_sync.py"
RANKS, ACCUMULATE, BATCH = 2, 4, 8


def rows(stdout):
    """{'without': (calls, bytes), 'with no_sync()': (calls, bytes)} from the printed table."""
    table = {}
    for line in stdout.splitlines():
        for name in ("without", "with no_sync()"):
            if line.startswith(name):
                calls, nbytes = line[len(name) :].split()
                table[name] = (float(calls), int(nbytes.replace(",", "")))
    return table


def check_run(workdir, atol, env=None, ranks=RANKS):
    result = run(
        SNIPPET, "--accumulate", ACCUMULATE, launcher="torchrun", nproc=ranks, workdir=workdir,
        env=env,
    )
    assert (f"{ranks} processes, {ACCUMULATE} micro-batches of {BATCH} samples per optimiser "
            f"step: {ACCUMULATE * BATCH * ranks} samples") in result.stdout
    table = rows(result.stdout)
    state = load(workdir / "no_sync.pt")
    model_bytes = sum(t.numel() * t.element_size() for t in state.values())
    # one all-reduce per micro-batch without no_sync(), one per accumulation window with it
    assert table["without"] == (ACCUMULATE, ACCUMULATE * model_bytes)
    assert table["with no_sync()"] == (1, model_bytes)
    # Accumulating k micro-batches of B on N processes is one step on a batch of k * B * N.
    reference = full_batch_reference(
        SNIPPET,
        loss_fn=torch.nn.functional.mse_loss,
        batch_size=ACCUMULATE * BATCH * ranks,
        epochs=2,
        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
    )
    assert_same_state(state, reference, atol)
    return result


@on_each_device(gpus=RANKS, one_gpu=True)
def test_no_sync_all_reduces_once_per_window_and_trains_the_same(tmp_path, device):
    """At world size 1 DDP still all-reduces every bucket, and no_sync() still saves them."""
    ranks = device.ranks(RANKS)
    # differences below 1e-6 on the CPU, 1e-4 on GPUs
    result = check_run(tmp_path, atol=device.pick(1e-6, 1e-4), env=device.env(), ranks=ranks)
    device.assert_ran(ranks, result=result)
    device.check_output(result)


def test_forward_outside_no_sync_still_all_reduces(exercise_checks):
    """The page's exercise: no_sync() must cover the forward pass too."""
    assert exercise_checks["no_sync_placement"] == {
        "nowhere": ACCUMULATE,
        "forward and backward": 1,
        "backward only": ACCUMULATE,
    }
