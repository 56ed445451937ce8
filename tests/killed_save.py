"""Kill a snippet with SIGKILL while it writes its checkpoint, as a time limit or a lost node
may (tests/kill_in_save.py does the killing), and check what is left."""

import re
from pathlib import Path

from harness.launch import run, snippet
from tests.compare import load

KILLER = Path(__file__).with_name("kill_in_save.py")
#: What the killed process prints on stderr just before the kill.
KILLED = re.compile(r"killed after (\d+) of (\d+) bytes of (\S+)")


def run_killed(script, save, *args, workdir, **options):
    """Run ``script`` (under snippets/, or a path) with ``args``, killed halfway through its
    ``save``-th torch.save; check that it died there and return the run's Result."""
    path = script if Path(script).is_absolute() else snippet(script)
    result = run(KILLER, str(save), str(path), *args, workdir=workdir, check=False,
                 **options)
    assert result.returncode != 0 and KILLED.search(result.text), result.report()
    return result


def plain_save_copy(script, folder):
    """A copy of ``script`` that saves its checkpoint with a plain torch.save over the old
    one: the temporary file and the os.replace removed."""
    code = snippet(script).read_text()
    lines = [line for line in code.splitlines(keepends=True) if "os.replace(" not in line]
    plain = "".join(lines).replace('f"{args.checkpoint}.tmp"', "args.checkpoint")
    assert plain != code and ".tmp" not in plain, f"{script} no longer saves as expected"
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / Path(script).name
    copy.write_text(plain)
    return copy


def assert_only_plain_save_breaks(script, checkpoint, save, *args, folder, **options):
    """The same kill in the same save of a plain-save copy leaves a checkpoint that does not
    load: the kill lands while the checkpoint is being written."""
    copy = plain_save_copy(script, folder)
    run_killed(copy, save, *args, workdir=folder, **options)
    try:
        load(folder / checkpoint)
    except (OSError, RuntimeError):  # no zip archive, or a truncated one
        return
    raise AssertionError(f"the plain save of {copy} survived the kill: the kill is too late")
