"""snippets/model_parallel/tp_dropout.py, shown on docs/model_parallel/tensor_parallel_random.md."""

import json
import re
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from harness.launch import run, snippet_code
from tests.devices import on_each_device

SNIPPET = "model_parallel/tp_dropout.py"
WAYS = ["Replicate, same seed", "Replicate, seed + rank", "Shard(1), same seed",
        "own seed per rank", "my part of one mask"]


def table(stdout):
    """{way: [masks of the ranks, masks = one process's]} from the first table."""
    rows = {}
    for line in stdout.splitlines():
        for way in WAYS:
            if line.startswith(way + " ") and "rank 0 [" not in line:
                rows[way] = [line[26:46].strip(), line[46:].strip()]
    return rows


def printed_masks(stdout, way):
    """The first row of each printed rank's mask for ``way``: {rank: [0/1, ...]}."""
    line = next(l for l in stdout.splitlines() if l.startswith(way + " ") and "rank 0 [" in l)
    return {int(r): json.loads(m) for r, m in re.findall(r"rank (\d+) (\[[\d, ]+\])", line)}


def two_uses(own, ranks=2):
    """Use a rank's own random numbers twice, as two training steps would, on the CPU, on
    its part of the features of ``ranks``: (the two masks, whether the second differs,
    whether the shared generator is as before)."""
    code = snippet_code(SNIPPET)
    mine = torch.ones(code["TOKENS"], code["FEATURES"] // ranks)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    with own():
        first = F.dropout(mine, 0.5) != 0
    with own():
        second = F.dropout(mine, 0.5) != 0
    return first, second, not torch.equal(first, second), torch.equal(torch.get_rng_state(), before)


@on_each_device(gpus=2, one_gpu=True)
def test_which_ranks_draw_the_same_dropout_mask(device, tmp_path):
    """On one GPU one rank: every mask is trivially 'the same' on every rank."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    tracker = "yes" if device.cuda else "not supported"
    assert f"DTensor's random-number tracker on {device.type}: {tracker}" in result.stdout
    rows = table(result.stdout)
    assert list(rows) == WAYS
    # each rank's own stream gives a new mask at its second use and leaves the shared one alone
    assert "own seed, used twice, a new mask on every rank: yes" in result.stdout
    assert "shared generator as it was after both uses, on every rank: yes" in result.stdout
    if not device.cuda:  # the masks printed are those of the seeds SEED + 1000 + rank
        code = snippet_code(SNIPPET)
        for rank in range(ranks):
            own = code["OwnRandomNumbers"](code["SEED"] + 1000 + rank, torch.device("cpu"))
            first, second, _, _ = two_uses(own, ranks)
            assert printed_masks(result.stdout, "own seed per rank")[rank] == (
                first[0].int().tolist())
            assert printed_masks(result.stdout, "own seed, used again")[rank] == (
                second[0].int().tolist())
    if ranks == 1:
        return
    assert rows["Replicate, same seed"] == ["the same", "yes"]
    # a "replicated" tensor whose copies differ
    assert rows["Replicate, seed + rank"] == ["different", "no"]
    if device.cuda:  # the tracker gives each shard its own part of the random numbers
        assert rows["Shard(1), same seed"][0] == "different"
    else:  # without the tracker, each rank draws the same numbers for its shard
        assert rows["Shard(1), same seed"] == ["the same", "no"]
    assert rows["own seed per rank"] == ["different", "no"]
    assert rows["my part of one mask"] == ["different", "yes"]


#: Run as 2 ranks, each seeded differently: does DTensor's manual_seed seed a CPU mesh?
SEED_ON_CPU = """
import json, time, warnings
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor._random import manual_seed

dist.init_process_group("gloo")
try:
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(dist.get_rank())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manual_seed(0, mesh)
    numbers = [None, None]
    dist.all_gather_object(numbers, torch.rand(3).tolist())
    if dist.get_rank() == 0:
        print(json.dumps({"same": numbers[0] == numbers[1],
                          "warnings": [str(w.message) for w in caught]}))
finally:
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
"""


def test_dtensor_manual_seed_does_nothing_on_the_cpu(tmp_path):
    script = tmp_path / "seed_on_cpu.py"
    script.write_text(SEED_ON_CPU)
    result = run(script, launcher="torchrun", nproc=2, workdir=tmp_path)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["same"] is False  # the ranks' random numbers still differ
    assert "DTensor manual_seed() may not have complete support on cpu device mesh" in (
        found["warnings"])


def test_own_random_numbers_go_on_between_uses_and_leave_the_shared_ones_alone():
    """The snippet's OwnRandomNumbers passes the check that the run prints; a helper that
    seeds again at every use (the same mask every step) or that does not put the shared
    generator back fails it."""
    own = snippet_code(SNIPPET)["OwnRandomNumbers"](1000, torch.device("cpu"))
    assert two_uses(own)[2:] == (True, True)

    @contextmanager
    def seeded_at_every_use():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1000)
            yield

    @contextmanager
    def not_put_back():
        yield

    assert two_uses(seeded_at_every_use)[2:] == (False, True)
    assert two_uses(not_put_back)[2:] == (True, False)
