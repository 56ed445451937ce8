"""The sharded example data set of snippets/slurm/train_shards.py, and what a run of it
printed: for its own test, and for the data-staging job's (docs/slurm/data.md)."""

import re

from harness.launch import run

SNIPPET = "slurm/train_shards.py"
#: The example data set: 16 shard files of 64 samples.
SHARDS = [f"shard-{i:05d}.pt" for i in range(16)]


def reads(stdout: str) -> list[tuple[int, str, int, list[str], str]]:
    """(rank, node, samples, shard names, folder) of every rank, as rank 0 printed them."""
    return [(int(rank), node, int(samples), names.split(", "), folder)
            for rank, node, samples, names, folder in re.findall(
                r"^rank (\d+) on (\S+): (\d+) samples from (.*) in (\S+)$", stdout, re.M)]


def epoch_losses(stdout: str) -> list[tuple[float, int]]:
    return [(float(loss), int(n)) for loss, n in re.findall(
        r"^epoch \d+: loss (\S+) over (\d+) samples$", stdout, re.M)]


def make_shards(workdir, folder="project/shards"):
    """The example data set, written by the snippet as the page says."""
    made = run(SNIPPET, "--make-shards", folder, workdir=workdir)
    assert made.stdout.startswith("wrote 16 shards of 64 samples")
    return sorted(p.name for p in (workdir / folder).iterdir())


def assert_trained(stdout: str, world_size: int) -> None:
    """Every sample read once, by one rank; the loss fell; over all 1024 samples."""
    ranks = reads(stdout)
    assert [r[0] for r in ranks] == list(range(world_size))
    shards = [name for r in ranks for name in r[3]]
    assert sorted(shards) == SHARDS  # each once
    assert all(r[2] == 1024 // world_size for r in ranks)
    losses = epoch_losses(stdout)
    assert len(losses) == 3 and all(n == 1024 for _, n in losses)
    assert losses[-1][0] < losses[0][0]
