"""Centre profiles: one TOML file describes a cluster, and job scripts follow it.

A profile (``profiles/*.toml``, read with :mod:`tomllib`) names the cluster, its GPU
partitions and their shape, how a job asks for an account, and the lines that set up
the software environment. :func:`load` reads and checks one; every problem is a
:class:`ProfileError` whose message is one line naming the file, the key and what was
expected. ``docs/slurm/profile_reference.md`` documents every key.

:func:`render` turns a job script of ``snippets/`` into the script for a profile. The
script marks the places the profile may change:

``#>cluster gpus=G tasks=T`` ... ``#<cluster``
    around the ``#SBATCH`` lines that depend on the cluster. ``G`` is ``node`` (every
    GPU of a node), a number, or ``0`` (a job without GPUs); ``T`` is ``gpu`` (one task
    per GPU) or a number of tasks per node. Inside, the values of ``--gpus-per-node``,
    ``--ntasks-per-node`` (when ``T`` is ``gpu``), ``--cpus-per-task``, ``--mem``,
    ``--partition`` and ``--account`` are recomputed from the profile; lines the profile
    requires and the script lacks (``--partition`` when the GPU partition is not the
    default one, ``--account`` when accounts are required, ``--exclusive``, ``--mem``
    unless the script asks for memory per GPU or per CPU) are added at the end of the
    block. A ``--gpus-per-node`` that names a GPU type keeps naming the partition's type
    (where it has one), and a ``--gres=gpu:...`` in its comment follows it; a
    ``--constraint`` asks for the partition's last feature, and goes where it has none.
``#>environment`` ... ``#<environment``
    around the lines that set up the software environment (maybe none). A profile
    with ``[environment] setup`` lines replaces them; its network interface and CPU
    binding are exported after them.

The marker lines themselves are dropped: for the default profile, the rendered script
is the file without its marker lines, byte for byte. The same function gives what a
page shows and offers for download (``docs/_ext/snippets.py``) and what the tests
submit (the ``sbatch`` launcher of ``harness/slurm.py``).

The profile in use is the file named by the environment variable ``CENTRE`` (``make
html CENTRE=profiles/h100.toml``), or ``profiles/default.toml``.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
DEFAULT = PROFILES / "default.toml"
ENV_VAR = "CENTRE"


class ProfileError(ValueError):
    """A profile that cannot be used, or a job script without the markers it needs."""


@dataclass(frozen=True)
class Partition:
    name: str
    gpus_per_node: int
    cpus_per_gpu: int
    mem_per_gpu: str
    gpu_type: str = ""
    ask_type: bool = True
    features: tuple[str, ...] = ()
    default: bool = False
    description: str = ""

    @property
    def mem_per_gpu_mb(self) -> int:
        return _megabytes(self.mem_per_gpu)

    def gpu_request(self, gpus: int | None = None, typed: bool = False) -> str:
        """The value of ``--gpus-per-node`` for ``gpus`` GPUs (default: the whole node):
        with the GPU type where the partition's jobs name it, or where ``typed`` asks for
        it and the GPUs have one."""
        gpus = self.gpus_per_node if gpus is None else gpus
        name = self.gpu_type and (self.ask_type or typed)
        return f"{self.gpu_type}:{gpus}" if name else str(gpus)


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    login_host: str
    account: str
    account_required: bool
    exclusive: bool
    ask_memory: bool
    scratch: str
    project: str
    accounts_url: str
    support_url: str
    docs_url: str
    gpu_vendor: str
    partitions: tuple[Partition, ...]
    setup: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    nccl_socket_ifname: str = ""
    cpu_bind: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def partition(self) -> Partition:
        """The partition the job scripts use: the first one."""
        return self.partitions[0]

    @property
    def gpus_per_node(self) -> int:
        return self.partition.gpus_per_node

    @property
    def is_default(self) -> bool:
        return self.path.resolve() == DEFAULT.resolve()


# --- Schema --------------------------------------------------------------------------------

#: key: (type, required, default, description). Descriptions feed the reference page.
CLUSTER_KEYS = {
    "name": (str, True, None, "the cluster's name, as its users call it"),
    "login_host": (str, True, None, "the host name users log in to (an example is fine)"),
    "account": (str, False, "myproject", "the example project name shown in `--account=`"),
    "account_required": (bool, False, False,
                         "true: every job must name its project with `--account=`"),
    "exclusive": (bool, False, False, "true: GPU jobs take whole nodes (`--exclusive`)"),
    "ask_memory": (bool, False, False,
                   "true: every GPU job asks for its memory with `--mem=`"),
    "scratch": (str, False, "/scratch/$USER", "where jobs should write large temporary data"),
    "project": (str, False, "", "where a project's shared data lives"),
    "accounts_url": (str, False, "", "the centre's page on getting a project and an account"),
    "support_url": (str, False, "", "the centre's support page or address"),
    "docs_url": (str, False, "", "the centre's own documentation"),
    "gpu_vendor": (str, False, "nvidia", '`"nvidia"` (CUDA, NCCL) or `"amd"` (ROCm, RCCL)'),
}
PARTITION_KEYS = {
    "name": (str, True, None, "the partition's name (`--partition=`)"),
    "gpus_per_node": (int, True, None, "GPUs (or GPU dies) per node"),
    "cpus_per_gpu": (int, True, None, "CPUs a job may take per GPU, as Slurm counts them "
                     "(`--cpus-per-gpu`: a hardware thread each on nodes with SMT, unless "
                     "configured otherwise)"),
    "mem_per_gpu": (str, True, None, 'memory a job may take per GPU, e.g. `"64G"` or `"60000"` (MB)'),
    "gpu_type": (str, False, "", "the GRES type of its GPUs, e.g. `\"a100\"` "
                 "(jobs then ask `--gpus-per-node=a100:4`); empty: no type"),
    "ask_type": (bool, False, True, "false: jobs ask for GPUs by count alone although they "
                 "have a type; only the script of the hardware page names the type"),
    "features": (list, False, [], "the nodes' features (`sinfo -o %f`), e.g. "
                 "`[\"a100\", \"ib\"]`; the hardware page's script asks for the last "
                 "with `--constraint`"),
    "default": (bool, False, False, "true: jobs land here without `--partition`"),
    "description": (str, False, "", "one line for readers: what the partition is for"),
}
ENVIRONMENT_KEYS = {
    "setup": (list, False, [], "the lines that set up the software environment in a job "
              "script, e.g. module loads; empty: the job scripts' own lines"),
    "modules": (list, False, [], "the modules the setup lines load (the tests generate "
                "them as an Lmod tree)"),
    "nccl_socket_ifname": (str, False, "", "network interface NCCL/RCCL must use "
                           "(exported as `NCCL_SOCKET_IFNAME`); empty: leave NCCL to choose"),
    "cpu_bind": (str, False, "", "CPU binding for `srun`'s tasks (exported as "
                 "`SLURM_CPU_BIND`), e.g. `\"map_cpu:...\"` or `\"mask_cpu:...\"`; empty: the "
                 "cluster's default"),
    "notes": (list, False, [], "sentences shown on the Your cluster page"),
}
TOP_KEYS = {"cluster": dict, "partitions": list, "environment": dict}
#: Each table of a profile, as it is written, with its keys.
TABLES = (("[cluster]", CLUSTER_KEYS), ("[[partitions]]", PARTITION_KEYS),
          ("[environment]", ENVIRONMENT_KEYS))
VENDORS = ("nvidia", "amd")
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
               dict: "a table"}
_MEM = re.compile(r"^(\d+)([KMGT]?)$")
#: A Slurm partition or node feature name.
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _megabytes(mem: str) -> int:
    number, unit = _MEM.match(mem).groups()
    return int(number) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[unit]


def _belongs(key: str, prefix: str) -> str:
    """Where a key unknown in this table belongs, as a hint: ``; it belongs in [cluster]``."""
    for table, keys in TABLES:
        if key in keys and not prefix.startswith(table.strip("[]")):
            return f"; it belongs in {table}"
    return ""


def _check_table(where: str, table: dict, keys: dict, prefix: str) -> dict:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise ProfileError(f"{where}: unknown key {prefix}{unknown[0]} "
                           f"(expected one of: {', '.join(keys)}{_belongs(unknown[0], prefix)})")
    values = {}
    for key, (kind, required, default, _) in keys.items():
        if key not in table:
            if required:
                raise ProfileError(f"{where}: missing key {prefix}{key} "
                                   f"(expected {_TYPE_NAMES[kind]})")
            values[key] = default
            continue
        value = table[key]
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            hint = ""
            if key == "gpus_per_node" and isinstance(value, str) and ":" in value:
                hint = " (the GPU type goes in gpu_type, e.g. gpu_type = \"a100\")"
            raise ProfileError(f"{where}: {prefix}{key} is {value!r}, "
                               f"expected {_TYPE_NAMES[kind]}{hint}")
        if kind is list and not all(isinstance(item, str) for item in value):
            raise ProfileError(f"{where}: {prefix}{key} must be a list of strings")
        values[key] = value
    return values


def load(path: str | Path | None = None) -> Profile:
    """Read and check a profile (default: $CENTRE, else profiles/default.toml)."""
    path = Path(path or os.environ.get(ENV_VAR) or DEFAULT)
    if not path.is_absolute() and not path.exists():
        path = ROOT / path
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise ProfileError(f"{where}: cannot read the profile ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{where}: not valid TOML ({error})") from None
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]} "
                           f"(expected one of: {', '.join(TOP_KEYS)})")
    for key, kind in TOP_KEYS.items():
        if key in data and not isinstance(data[key], kind):
            written = f"[{key}]" if isinstance(data[key], dict) else f"{key} = ..."
            wanted = (f"[{key}]" if kind is dict
                      else f"[[{key}]], one table per partition, with two brackets")
            raise ProfileError(f"{where}: {key} is written {written}, expected {wanted}")
    if "cluster" not in data:
        raise ProfileError(f"{where}: missing table [cluster]")
    cluster = _check_table(where, data["cluster"], CLUSTER_KEYS, "cluster.")
    if cluster["gpu_vendor"] not in VENDORS:
        raise ProfileError(f"{where}: cluster.gpu_vendor is {cluster['gpu_vendor']!r}, "
                           f"expected one of {', '.join(map(repr, VENDORS))}")
    if not data.get("partitions"):
        raise ProfileError(f"{where}: missing partition: expected at least one [[partitions]] "
                           f"table (the first is the one job scripts use)")
    partitions = []
    for i, table in enumerate(data["partitions"]):
        prefix = f"partitions[{i}]."
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: partitions[{i}] is {table!r}, expected a table")
        part = _check_table(where, table, PARTITION_KEYS, prefix)
        for key in ("gpus_per_node", "cpus_per_gpu"):
            if part[key] < 1:
                raise ProfileError(f"{where}: {prefix}{key} is {part[key]}, "
                                   f"expected a whole number of at least 1")
        if not _MEM.match(part["mem_per_gpu"]):
            raise ProfileError(f"{where}: {prefix}mem_per_gpu is {part['mem_per_gpu']!r}, "
                               f"expected megabytes or a number with K, M, G or T, e.g. \"64G\"")
        if not _NAME.fullmatch(part["name"]):
            raise ProfileError(f"{where}: {prefix}name is {part['name']!r}, "
                               f"expected a Slurm partition name")
        bad = [f for f in part["features"] if not _NAME.fullmatch(f)]
        if bad:
            raise ProfileError(f"{where}: {prefix}features has {bad[0]!r}, expected "
                               f"Slurm feature names (letters, digits, _ . -)")
        partitions.append(Partition(**part | {"features": tuple(part["features"])}))
    names = [p.name for p in partitions]
    if len(set(names)) != len(names):
        raise ProfileError(f"{where}: partitions: a partition name appears twice in {names}")
    if sum(p.default for p in partitions) > 1:
        raise ProfileError(f"{where}: partitions: more than one has default = true")
    env = _check_table(where, data.get("environment", {}), ENVIRONMENT_KEYS, "environment.")
    return Profile(path=path, partitions=tuple(partitions), **cluster,
                   setup=tuple(env["setup"]), modules=tuple(env["modules"]),
                   nccl_socket_ifname=env["nccl_socket_ifname"], cpu_bind=env["cpu_bind"],
                   notes=tuple(env["notes"]))


# --- Rendering -----------------------------------------------------------------------------

_BEGIN = re.compile(r"^#>(cluster|environment)\b(.*)$")
_END = re.compile(r"^#<(cluster|environment)\s*$")
_SBATCH = re.compile(r"^(#SBATCH\s+--)([a-z-]+)(?:=(\S*))?(\s*)(#.*)?$")


def has_markers(text: str) -> bool:
    return any(_BEGIN.match(line) for line in text.splitlines())


def _set_value(line: str, value: str) -> str:
    """The #SBATCH line with a new value, its comment kept in its column when it fits."""
    m = _SBATCH.match(line)
    head = f"{m[1]}{m[2]}={value}"
    if not m[5]:
        return head
    column = len(f"{m[1]}{m[2]}={m[3]}") + len(m[4])
    return head + " " * max(1, column - len(head)) + m[5]


def _cluster_block(lines: list[str], args: str, profile: Profile, where: str) -> list[str]:
    attrs = dict(re.findall(r"(\w+)=(\S+)", args))
    unknown = set(attrs) - {"gpus", "tasks"}
    if unknown or "gpus" not in attrs:
        raise ProfileError(f"{where}: marker '#>cluster{args}': expected "
                           f"'#>cluster gpus=node|N|0 tasks=gpu|N'")
    part = profile.partition
    gpus = part.gpus_per_node if attrs["gpus"] == "node" else int(attrs["gpus"])
    tasks = attrs.get("tasks", "")
    tasks_per_node = gpus if tasks == "gpu" else int(tasks) if tasks.isdigit() else 0
    mem = part.mem_per_gpu
    number, unit = _MEM.match(mem).groups()
    values = {
        "partition": part.name,
        "account": profile.account,
        "mem": f"{int(number) * gpus}{unit}" if gpus else None,
    }
    if gpus:
        values["gpus-per-node"] = part.gpu_request(gpus)
        if tasks == "gpu":
            values["ntasks-per-node"] = str(gpus)
        if tasks_per_node:
            values["cpus-per-task"] = str(gpus * part.cpus_per_gpu // tasks_per_node)
    out, seen = [], set()
    for line in lines:
        m = _SBATCH.match(line)
        if m:
            seen.add(m[2])
            if m[2] == "constraint":  # a feature: the partition's last, or none to ask
                if not part.features:
                    continue
                line = _set_value(line, part.features[-1])
            elif m[2] == "gpus-per-node" and gpus and m[3] and ":" in m[3]:  # names a type
                line = _set_value(line, part.gpu_request(gpus, typed=True))
            elif values.get(m[2]) is not None and m[3] is not None:
                line = _set_value(line, values[m[2]])
            if m[2] == "gpus-per-node" and m[5]:  # "or: --gres=gpu:..." in its comment
                value = _SBATCH.match(line)[3]
                line = re.sub(r"--gres=gpu:[\w.:-]+", f"--gres=gpu:{value}", line)
        out.append(line)
    wanted = []
    if not part.default:
        wanted.append(("partition", part.name))
    if profile.account_required:
        wanted.append(("account", profile.account))
    if gpus and profile.exclusive:
        wanted.append(("exclusive", None))
    if gpus and profile.ask_memory and not seen & {"mem-per-gpu", "mem-per-cpu"}:
        wanted.append(("mem", values["mem"]))  # the three exclude one another
    out += [f"#SBATCH --{key}" + (f"={value}" if value is not None else "")
            for key, value in wanted if key not in seen]
    return out


def _environment_block(lines: list[str], profile: Profile) -> list[str]:
    out = list(profile.setup) if profile.setup else list(lines)
    if profile.nccl_socket_ifname:
        out.append(f"export NCCL_SOCKET_IFNAME={profile.nccl_socket_ifname}"
                   "  # the network NCCL/RCCL use between nodes")
    if profile.cpu_bind:
        out.append(f"export SLURM_CPU_BIND={profile.cpu_bind}"
                   "  # srun binds each task to these cores")
    if out and not lines:
        out.append("")  # set apart from the script's own lines
    return out


def render(text: str, profile: Profile | None = None, where: str = "job script") -> str:
    """The job script ``text`` for ``profile``, without its marker lines."""
    profile = profile or load()
    if not has_markers(text):
        raise ProfileError(f"{where}: no '#>cluster' marker: a job script marks its cluster "
                           f"lines (CONTRIBUTING.md, 'Add a page, a snippet and its test')")
    out: list[str] = []
    block: list[str] | None = None
    kind = args = ""
    for number, line in enumerate(text.split("\n"), 1):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if block is not None:
                raise ProfileError(f"{where}:{number}: '#>{begin[1]}' inside '#>{kind}'")
            block, kind, args = [], begin[1], begin[2]
        elif end:
            if block is None or end[1] != kind:
                raise ProfileError(f"{where}:{number}: '#<{end[1]}' without its '#>{end[1]}'")
            out += (_cluster_block(block, args, profile, where) if kind == "cluster"
                    else _environment_block(block, profile))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ProfileError(f"{where}: '#>{kind}' without its '#<{kind}'")
    return "\n".join(out)


def render_file(path: str | Path, profile: Profile | None = None) -> str:
    path = Path(path)
    return render(path.read_text(), profile, where=str(path))


def needs_rendering(path: str | Path) -> bool:
    """Job scripts follow the profile: every ``.sbatch`` file of snippets/ (a path
    relative to snippets/, or an absolute one inside it)."""
    path = Path(path)
    inside = not path.is_absolute() or path.resolve().is_relative_to(ROOT / "snippets")
    return path.suffix == ".sbatch" and inside


def keys_text() -> str:
    """Every key a profile may hold, table by table, with its type, its default and what
    it means: the reference, readable without building the site."""
    lines = []
    for table, keys in TABLES:
        lines.append(table)
        for key, (kind, required, default, meaning) in keys.items():
            need = "required" if required else f"default {as_toml(default)}"
            lines.append(f"  {key} ({_TYPE_NAMES[kind]}, {need}): {meaning.replace('`', '')}")
        lines.append("")
    return "\n".join(lines)


def as_toml(value) -> str:
    """A default as a profile would write it: ``true``, ``"myproject"``, ``[]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value).replace("'", '"')


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.profile [PROFILE]``: check a profile, one line either way;
    ``--keys``: print every key; ``PROFILE --render JOB``: print a job script (a path, or
    one relative to snippets/) as the profile renders it."""
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m harness.profile", description=main.__doc__)
    parser.add_argument("profile", nargs="?", help="a profile (default: $CENTRE, else "
                        "profiles/default.toml)")
    parser.add_argument("--keys", action="store_true", help="print every key and its meaning")
    parser.add_argument("--render", metavar="JOB", help="print this job script as the "
                        "profile renders it")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.keys:
        print(keys_text(), end="")
        return 0
    try:
        p = load(args.profile)
        if args.render:
            job = Path(args.render)
            if not job.exists():
                job = ROOT / "snippets" / args.render
            print(render_file(job, p), end="")
            return 0
    except (ProfileError, OSError) as error:
        print(error, file=sys.stderr)
        return 1
    parts = ", ".join(f"{q.name} ({q.gpus_per_node} GPUs per node)" for q in p.partitions)
    print(f"{p.path}: {p.name}, partitions {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
