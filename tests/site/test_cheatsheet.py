"""docs/cheatsheet.md lists only what a tested snippet or job script uses.

Every command (the first word of a table's first column), option and variable in the
cheat sheet's tables must occur in a file under snippets/ (not a captured output) whose mirrored test exists, so
that it ran in the tests exactly as spelled there.
"""

import re

from harness.launch import ROOT, SNIPPETS
from harness.mirror import mirror_test, snippet_files

CHEATSHEET = ROOT / "docs" / "cheatsheet.md"
#: Words of a table's code spans that are placeholders or arguments, not things to run.
PLACEHOLDERS = {"JOBID", "HOST", "PORT", "PD", "RUN_ID", "LOCAL_RANK_DIR"}


def table_entries() -> list[str]:
    """The code spans of every table row (header and rule excluded); a span of the first
    column starts with ``$`` when its first word is a command."""
    rows = [line for line in CHEATSHEET.read_text().splitlines() if line.startswith("| `")]
    return [("$" if column == 1 else "") + span for row in rows
            for column, cell in enumerate(row.split("|")) for span in re.findall(r"`([^`]+)`", cell)]


def names(entry: str) -> set[str]:
    """The command, its options (without their values) and the variables of one entry."""
    words = {v for v in re.findall(r"\$\{?([A-Z][A-Z0-9_]+)", entry)}  # "$SLURM_JOB_ID"
    command, entry = entry.startswith("$"), entry.removeprefix("$")
    for i, word in enumerate(entry.split()):
        option = re.match(r"(--[\w-]+)", word)
        variable = re.match(r"^([A-Z][A-Z0-9_]+)(=|$)", word)
        if option:
            words.add(option[1])
        elif variable and variable[1] not in PLACEHOLDERS:
            words.add(variable[1])
        elif i == 0 and command and re.fullmatch(r"[a-z]+", word):
            words.add(word)  # the command
    return words


def snippets_with_tests() -> dict[str, str]:
    return {p.relative_to(SNIPPETS).as_posix(): p.read_text() for p in snippet_files()
            if mirror_test(p).is_file()}


def test_the_cheatsheet_has_tables_of_every_kind():
    entries = table_entries()
    listed = set().union(*map(names, entries))
    assert {"sbatch", "squeue", "scontrol", "scancel", "torchrun", "srun", "mpirun"} <= listed
    assert {"--log-dir", "--redirects", "--tee", "--local-ranks-filter"} <= listed
    assert {"TORCH_DISTRIBUTED_DEBUG", "NCCL_DEBUG", "CUDA_LAUNCH_BLOCKING"} <= listed
    assert len(entries) > 40


def test_everything_the_cheatsheet_lists_occurs_in_a_tested_snippet():
    files = snippets_with_tests()
    untested = sorted(name for entry in table_entries() for name in names(entry)
                      if not any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
                                 for text in files.values()))
    assert not untested, f"listed on docs/cheatsheet.md, in no tested snippet: {untested}"


def test_the_check_finds_what_no_snippet_uses():
    assert names("$sacct -j JOBID --format=JobID,MaxRSS") == {"sacct", "--format"}
    files = snippets_with_tests()
    assert not any(re.search(r"(?<![\w-])sacct(?![\w-])", text) for text in files.values())
