"""What every job script of the guide must do, read from the scripts themselves, and
what the local Slurm cluster, shaped like the centre profile, says of each.

From Slurm 22.05 to 23.02, srun does not inherit sbatch's --cpus-per-task: each task
that srun starts is given one core, whatever the job asked for, unless the script
exports SRUN_CPUS_PER_TASK or passes --cpus-per-task to srun (docs/slurm/pitfalls.md).
The jobs that show it on the local cluster are in test_anatomy.py and
test_anatomy_torchrun.py.
"""

import re
import subprocess

import pytest

from harness import profile as centre
from harness.launch import SNIPPETS

#: A command line that runs srun (continuation lines joined): srun as a command, before
#: any comment on the line.
SRUN = re.compile(r"^(?:[^#\n]*[|&;(]\s*|[ \t]*)srun\b.*$", re.M)
EXPORT = re.compile(r"^export SRUN_CPUS_PER_TASK=\$SLURM_CPUS_PER_TASK\b", re.M)


def asks_for_cpus_per_task(text: str) -> bool:
    return bool(re.search(r"^#SBATCH\s+(--cpus-per-task|-c)\b", text, re.M))


#: Every job script of the guide.
JOB_SCRIPTS = sorted(SNIPPETS.glob("*/*.sbatch"))
#: Those that ask for cores per task and start tasks with srun.
SCRIPTS = [path for path in JOB_SCRIPTS
           if asks_for_cpus_per_task(path.read_text()) and SRUN.search(path.read_text())]


def name(path) -> str:
    """A job script's test id: its path under snippets/."""
    return path.relative_to(SNIPPETS).as_posix()


def test_the_scripts_with_srun_and_cores_per_task_are_all_found():
    assert {name(path) for path in SCRIPTS} >= {
        "slurm/anatomy.sbatch", "slurm/anatomy_torchrun.sbatch", "slurm/environment.sbatch",
        "slurm/multi_node.sbatch", "slurm/multi_node_torchrun.sbatch",
        "slurm/one_node.sbatch", "slurm/preemptible.sbatch", "slurm/tasks_vs_gpus.sbatch",
        "frameworks/accelerate_train.sbatch", "frameworks/horovod_train.sbatch",
        "memory/deepspeed_zero.sbatch", "performance/scaling.sbatch"}


@pytest.mark.parametrize("path", SCRIPTS, ids=name)
def test_every_srun_passes_on_the_cores_per_task(path):
    text = path.read_text().replace("\\\n", " ")
    export = EXPORT.search(text)
    for srun in SRUN.finditer(text):
        exported_before = export is not None and export.start() < srun.start()
        assert exported_before or "--cpus-per-task" in srun[0], (
            f"{path.name}: this srun gives each task one core on Slurm 22.05 to 23.02: "
            f"{srun[0].strip()}")


def sbatch_test_only(text: str, folder) -> subprocess.CompletedProcess:
    """``sbatch --test-only`` of a job script: when and where Slurm would start it."""
    (folder / "job.sbatch").write_text(text)
    return subprocess.run(["sbatch", "--test-only", "job.sbatch"], cwd=folder,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slurm
@pytest.mark.parametrize("path", JOB_SCRIPTS, ids=name)
def test_slurm_would_start_every_job_script_as_the_page_shows_it(path, tmp_path):
    """``sbatch --test-only``: the job script, rendered for the centre profile, asks for
    what a cluster of that shape has (partition, GPUs of its type, cores, memory, node
    features), so Slurm would schedule it; a request the nodes cannot meet is refused.
    The scripts' own tests then submit them and check what they did. Where the centre
    caps a job's CPUs below a node's, no script asks for a whole node (``--exclusive``),
    which the partition would refuse (see the next test), so every script is accepted."""
    text = centre.render_file(path)
    check = sbatch_test_only(text, tmp_path)
    assert check.returncode == 0, f"{path.name}: {check.stderr.strip()}"
    where = re.search(r"^sbatch: Job \d+ to start at \S+ using \d+ processors on nodes? "
                      r"(\S+) in partition (\S+)$", check.stderr, re.M)
    assert where, check.stderr
    assert re.fullmatch(r"node[12]|node\[1-2\]", where[1]), check.stderr
    assert where[2] == centre.load().partition.name, check.stderr


@pytest.mark.slurm
def test_a_whole_node_is_refused_where_a_job_may_not_have_its_cpus(tmp_path):
    """Why the scripts leave out ``--exclusive`` there (harness/profile.py): the hardware
    page's script with the line put back is refused, as it asks for every CPU of a node.
    Where a job may have them all, the line is in the script and the job is accepted."""
    part = centre.load().partition
    text = centre.render_file(SNIPPETS / "slurm/hardware.sbatch")
    if not part.refuses_whole_nodes:
        assert re.search(r"^#SBATCH --exclusive\b", text, re.M)
        assert sbatch_test_only(text, tmp_path).returncode == 0
        return
    comment = centre.whole_node_refused(part)
    assert f"\n{comment}\n" in text and not re.search(r"^#SBATCH --exclusive", text, re.M)
    check = sbatch_test_only(text.replace(comment, "#SBATCH --exclusive"), tmp_path)
    assert check.returncode != 0
    assert "Requested node configuration is not available" in check.stderr, check.stderr


@pytest.mark.slurm
def test_a_job_that_no_node_can_hold_is_refused(tmp_path):
    """The check that Slurm would start every job script can fail: one GPU more per node
    than the nodes have."""
    profile = centre.load()
    part = profile.partition
    asked, more = (f"{profile.ask_gpus(part.gpu_request(n))}\n"
                   for n in (part.gpus_per_node, part.gpus_per_node + 1))
    text = centre.render_file(SNIPPETS / "slurm/one_node.sbatch")
    assert asked in text
    check = sbatch_test_only(text.replace(asked, more), tmp_path)
    assert check.returncode != 0
    assert "Requested node configuration is not available" in check.stderr, check.stderr


#: The job scripts that run PyTorch without the environment line, and why.
OWN_ENVIRONMENT = {
    "slurm/wrong_python.sbatch": "the pitfall of a job that does not set up its environment",
    "slurm/environment.sbatch": "the lesson: module lines in the block, then the activation",
}
ACTIVATE = "source .venv/bin/activate"


def runs_pytorch(text: str) -> bool:
    return bool(centre._LAUNCH.search(text))


def test_the_scripts_that_run_pytorch_are_all_found():
    assert {name(path) for path in JOB_SCRIPTS if runs_pytorch(path.read_text())} >= {
        "slurm/one_node.sbatch", "quickstart/one_node.sbatch", "slurm/no_local_rank.sbatch",
        "troubleshooting/node_health.sbatch", "slurm/stage_data.sbatch", *OWN_ENVIRONMENT}


@pytest.mark.parametrize("path", [p for p in JOB_SCRIPTS if runs_pytorch(p.read_text())],
                         ids=name)
def test_every_job_script_sets_up_its_own_environment(path):
    """Between its environment markers, before its first command, as the quickstart's do
    (a centre profile puts its module lines there instead): the tests submit every job
    from a shell where no virtual environment is active (harness/slurm.py)."""
    text = path.read_text()
    if name(path) == "slurm/wrong_python.sbatch":
        assert ACTIVATE not in text and "#>environment" not in text
        return
    if name(path) == "slurm/environment.sbatch":
        assert re.search(rf"^#<environment\n{re.escape(ACTIVATE)}$", text, re.M)
        return
    block = re.search(r"^#>environment\n(.*?)^#<environment$", text, re.M | re.S)
    assert block and block[1].startswith(ACTIVATE), (
        f"{path.name}: put `{ACTIVATE}` between `#>environment` and `#<environment`, "
        f"before the script's first command")


# --- Every command that runs PyTorch runs in the centre's environment ---------------------

#: The centre profiles the guide ships.
CENTRES = sorted((centre.ROOT / "profiles").glob("*.toml"))
#: The job scripts that run PyTorch without an environment block, and why.
WITHOUT_ENVIRONMENT = {name: why for name, why in OWN_ENVIRONMENT.items()
                       if name == "slurm/wrong_python.sbatch"}
#: A comment put after `#<environment` before rendering: where the block ends, rendered.
END_OF_ENVIRONMENT = "#@ the environment block ends above this line"


def render_with_end(text: str, profile: centre.Profile, part: centre.Partition,
                    where: str) -> tuple[str, int | None]:
    """The job script as ``profile`` renders it for ``part``, and the number of the
    rendered line its environment block ends on (0 where the block renders to nothing at
    the top; None: no block)."""
    marked = re.sub(r"(?m)^#<environment[ \t]*$", rf"\g<0>\n{END_OF_ENVIRONMENT}", text)
    lines = centre.render(marked, profile, where, profile.label(part)).split("\n")
    if END_OF_ENVIRONMENT not in lines:
        return "\n".join(lines), None
    end = lines.index(END_OF_ENVIRONMENT)
    return "\n".join(lines[:end] + lines[end + 1:]), end


def pytorch_commands(text: str, profile: centre.Profile) -> list[tuple[int, str, bool]]:
    """(line number, line, whether the container command starts it) of every command of
    a rendered job script that starts Python (python, torchrun, accelerate, deepspeed, also
    after srun, exec or mpirun): those harness.profile._LAUNCH finds once the container
    command is taken out again. Comment lines are left out."""
    wrap = f"{profile.container_exec} $CONTAINER " if profile.container_exec else ""
    plain, wrapped_at = text, set()
    if wrap:
        first, *rest = text.split(wrap)
        plain = first
        for part in rest:
            wrapped_at.add(len(plain))
            plain += part
    code = "\n".join(" " * len(line) if line.lstrip().startswith("#") else line
                     for line in plain.split("\n"))  # comments blanked, offsets kept
    lines = text.split("\n")
    found = []
    for m in centre._LAUNCH.finditer(code):
        number = code.count("\n", 0, m.start(1)) + 1
        found.append((number, lines[number - 1], m.start(1) in wrapped_at))
    return found


def environment_problems(script: str, text: str, end: int | None,
                         profile: centre.Profile, where: str) -> list[str]:
    """One line for each command of the rendered ``text`` that starts Python outside the
    centre's environment: before the end of the environment block (``end``, a line
    number), in a script without one, or, where the profile has a container, not through
    the container command."""
    commands = pytorch_commands(text, profile)
    problems = []
    if commands and end is None and script not in WITHOUT_ENVIRONMENT:
        number, line, _ = commands[0]
        problems.append(f"{where}, line {number}: `{line.strip()}` runs Python, but the "
                        f"script has no `#>environment` ... `#<environment` block")
    for number, line, contained in commands:
        if end is not None and number <= end:
            problems.append(f"{where}, line {number}: `{line.strip()}` runs Python before "
                            f"the end of the environment block (line {end})")
        if profile.container_exec and not contained:
            problems.append(f"{where}, line {number}: `{line.strip()}` runs Python outside "
                            f"the container (`{profile.container_exec} $CONTAINER ...`)")
    if profile.container_exec and any(contained for _, _, contained in commands):
        first = min(number for number, _, contained in commands if contained)
        exported = [n for n, line in enumerate(text.split("\n"), 1)
                    if line.startswith("export CONTAINER=")]
        if not exported or exported[0] > first:
            problems.append(f"{where}, line {first}: $CONTAINER is not exported before "
                            f"the first command that uses it")
    return problems


@pytest.mark.parametrize("centre_file", CENTRES, ids=lambda p: p.stem)
@pytest.mark.parametrize("path", JOB_SCRIPTS, ids=name)
def test_every_command_that_runs_pytorch_runs_in_the_centres_environment(path, centre_file):
    """Rendered for every partition of every profile the guide ships: every command that
    starts Python comes after the environment block (the centre's module lines, or the
    `.venv` the script activates), and, where the profile has a container, runs through
    the container command. A partition that cannot hold the job (more nodes than it lets
    one job have) is left out: the page shows no script there.

    Rule: Every command of a job script that starts Python (`python`, `torchrun`,
    `accelerate`, `deepspeed`, also after `srun`, `exec` or `mpirun`) comes after its
    `#>environment` ... `#<environment` block, rendered for every partition of every
    profile in `profiles/`, and runs through the container command of a profile with a
    container. Fix: move the command below `#<environment`, or add the block with the line
    that activates `.venv`, as the example in "Add a page, a snippet and its test" shows."""
    profile = centre.load(centre_file)
    problems, skipped = [], []
    for part in profile.partitions:
        where = f"{name(path)} for {centre_file.name} (partition {profile.label(part)})"
        try:
            text, end = render_with_end(path.read_text(), profile, part, where)
        except centre.TooManyNodes:
            skipped.append(profile.label(part))
            continue
        problems += environment_problems(name(path), text, end, profile, where)
    assert not problems, "\n".join(problems)
    if len(skipped) == len(profile.partitions):
        pytest.skip(f"more nodes than any partition of {centre_file.name} lets one job have")


def test_the_environment_check_finds_a_command_outside_the_environment():
    """The check above can fail: a script without its block, a command moved above the
    block, and a command a renderer left outside the container."""
    path = SNIPPETS / "quickstart" / "one_node.sbatch"
    text = path.read_text()
    block = re.search(r"(?ms)^#>environment\n.*?^#<environment\n", text)[0]
    launch = next(line for line in text.split("\n") if line.startswith("torchrun "))
    default = centre.load(centre.DEFAULT)
    # a shipped profile with a container (LUMI-G's), so that the check above meets one
    contained = next(p for p in map(centre.load, CENTRES) if p.container_exec)

    def problems(changed: str, profile: centre.Profile) -> list[str]:
        rendered, end = render_with_end(changed, profile, profile.partition, "one_node")
        return environment_problems("quickstart/one_node.sbatch", rendered, end, profile,
                                    "one_node")

    assert problems(text, default) == problems(text, contained) == []
    for profile in (default, contained):
        found = problems(text.replace(block, ""), profile)
        assert len(found) == 1 and "has no `#>environment`" in found[0], found
    above = text.replace(block, f"{launch}\n{block}")  # the command once more, above
    rendered, _ = render_with_end(above, default, default.partition, "one_node")
    line = rendered.split("\n").index(launch) + 1
    assert problems(above, default) == [
        f"one_node, line {line}: `{launch}` runs Python before the end of the environment "
        f"block (line {line + 1})"]
    rendered, end = render_with_end(text, contained, contained.partition, "one_node")
    left_out = rendered.replace(f"{contained.container_exec} $CONTAINER ", "", 1)
    found = environment_problems("quickstart/one_node.sbatch", left_out, end, contained,
                                 "one_node")
    assert len(found) == 1 and "runs Python outside the container" in found[0], found
