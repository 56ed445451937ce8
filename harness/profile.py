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
    block. Where a job may not have every CPU of a node (``max_cpus_per_job`` below the
    node's), a comment line that says so stands in place of ``--exclusive``, which would
    ask for them all. A ``--gpus-per-node`` that names a GPU type keeps naming the
    partition's type (where it has one), and a ``--gres=gpu:...`` in its comment follows
    it; a ``--constraint`` asks for the partition's last feature, and goes where it has
    none.
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


class TooManyNodes(ProfileError):
    """A job script for more nodes than a partition lets one job have: it is not
    rendered for that partition (the pages say why instead)."""

    def __init__(self, message: str, nodes: int, partition: "Partition"):
        super().__init__(message)
        self.nodes, self.partition = nodes, partition


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
    cores_per_node: int = 0
    threads_per_core: int = 1
    cpu_bind: str = ""
    mem_per_node: str = ""
    max_cpus_per_job: int = 0
    max_nodes: int = 0
    exclusive: bool | None = None
    ask_memory: bool | None = None
    mem_option: str = "mem"

    @property
    def key(self) -> str:
        """What names the partition among a profile's: its name, and its GPU type where
        one Slurm partition has nodes of several (``alvis:A40``)."""
        return f"{self.name}:{self.gpu_type}" if self.gpu_type else self.name

    @property
    def mem_per_gpu_mb(self) -> int:
        return round(_megabytes(self.mem_per_gpu))

    @property
    def mem_per_node_mb(self) -> int:
        """The node's memory for jobs in MB, 0 where the profile does not give it."""
        return round(_megabytes(self.mem_per_node)) if self.mem_per_node else 0

    def mem_for(self, gpus: int) -> str:
        """The memory of ``gpus`` GPUs, in the unit of ``mem_per_gpu``: ``"240G"``."""
        number, unit = _MEM.match(self.mem_per_gpu).groups()
        return f"{int(number) * gpus}{unit}"

    @property
    def cpus_per_node(self) -> int:
        """The CPUs Slurm counts on a node (cores times threads), 0 where not given."""
        return self.cores_per_node * self.threads_per_core

    def takes(self, nodes: int) -> bool:
        """Whether a job of ``nodes`` nodes may run here (``max_nodes``)."""
        return not self.max_nodes or nodes <= self.max_nodes

    @property
    def most_nodes(self) -> str:
        """``max_nodes`` as the pages say it, ``one node at most`` or ``at most 4 nodes``:
        true of a limit the centre enforces and of one it advises alike."""
        return ("one node at most" if self.max_nodes == 1 else
                f"at most {self.max_nodes} nodes")

    @property
    def refuses_whole_nodes(self) -> bool:
        """Whether a job may not have every CPU of a node, as ``--exclusive`` asks: the
        centre caps a job's CPUs on a node (``max_cpus_per_job``) below the node's
        (``cores_per_node`` x ``threads_per_core``)."""
        return 0 < self.max_cpus_per_job < self.cpus_per_node

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
    gpu_option: str
    partitions: tuple[Partition, ...]
    setup: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    nccl_socket_ifname: str = ""
    container_image: str = ""
    container_exec: str = ""
    notes: tuple[str, ...] = field(default=())
    torch: str = ""
    packages: tuple[str, ...] = ()
    site_title: str = ""
    site_logo: str = ""
    site_links: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()

    def ask_gpus(self, request: str) -> str:
        """The option that asks for ``request`` GPUs per node (``4`` or ``a100:4``) in the
        cluster's style: ``--gpus-per-node=4`` or ``--gres=gpu:4``."""
        return (f"--gres=gpu:{request}" if self.gpu_option == "gres"
                else f"--gpus-per-node={request}")

    @property
    def partition(self) -> Partition:
        """The partition the job scripts use: the first one."""
        return self.partitions[0]

    @property
    def gpus_per_node(self) -> int:
        return self.partition.gpus_per_node

    def partition_named(self, name: str | None) -> Partition:
        """The partition called ``name``, or ``name:type`` where one name has several GPU
        types (None: the first)."""
        if name is None:
            return self.partition
        found = [p for p in self.partitions if name in (p.name, p.key)]
        if len(found) == 1:
            return found[0]
        raise ProfileError(f"{self.path}: no partition {name!r} (the profile has "
                           f"{', '.join(self.label(p) for p in self.partitions)})")

    def label(self, part: Partition) -> str:
        """How readers tell the partition from the profile's others: its name, with its
        GPU type where another partition has the same name."""
        shared = sum(p.name == part.name for p in self.partitions) > 1
        return part.key if shared else part.name

    @property
    def is_default(self) -> bool:
        return self.path.resolve() == DEFAULT.resolve()

    def exclusive_on(self, part: Partition) -> bool:
        """Whether GPU jobs on ``part`` take whole nodes: the partition's own setting,
        else the cluster's."""
        return self.exclusive if part.exclusive is None else part.exclusive

    def ask_memory_on(self, part: Partition) -> bool:
        """Whether GPU jobs on ``part`` must ask for their memory: the partition's own
        setting, else the cluster's."""
        return self.ask_memory if part.ask_memory is None else part.ask_memory

    def placeholders(self) -> list[str]:
        """``key = value: why`` of every value a maintainer must confirm on the real
        system before publishing: the keys ``[about] unconfirmed`` names, and values that
        look like examples (``example`` in a host or address, ``xxx`` in a name)."""
        values = self.values()
        found = {key: "listed in [about] unconfirmed" for key in self.unconfirmed}
        for key, value in values.items():
            text = " ".join(value) if isinstance(value, (list, tuple)) else str(value)
            if key not in found and re.search(r"example\.|xxx", text, re.IGNORECASE):
                found[key] = "looks like an example"
        return [f"{key} = {as_toml(values.get(key, ''))}: {why}" for key, why in found.items()]

    def values(self) -> dict[str, object]:
        """Every key the profile file writes, ``cluster.account``, ``partitions[1].name``,
        with its value (keys left at their defaults are not in it)."""
        data = tomllib.loads(self.path.read_text())
        flat = {f"cluster.{k}": v for k, v in data.get("cluster", {}).items()}
        for i, part in enumerate(data.get("partitions", [])):
            flat |= {f"partitions[{i}].{k}": v for k, v in part.items()}
        for table in ("environment", "site"):
            flat |= {f"{table}.{k}": v for k, v in data.get(table, {}).items()}
        return flat


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
    "gpu_option": (str, False, "gpus-per-node", 'how jobs ask for GPUs: `"gpus-per-node"` '
                   '(`--gpus-per-node=4`) or `"gres"` (`--gres=gpu:4`)'),
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
    "cores_per_node": (int, False, 0, "CPU cores per node, all sockets together (`sinfo -o "
                       "%z` shows sockets:cores:threads); 0: not checked"),
    "threads_per_core": (int, False, 1, "hardware threads per core that Slurm counts as CPUs "
                         "(2 on nodes with SMT, unless Slurm is configured to count cores)"),
    "cpu_bind": (str, False, "", "CPU binding for the job scripts that start one task per "
                 "GPU (exported as `SLURM_CPU_BIND`), e.g. `\"mask_cpu:...\"` with one mask "
                 "per GPU, in the order of the GPUs; empty: the cluster's default"),
    "mem_per_node": (str, False, "", "memory a job may take on one node (Slurm's "
                     "`MaxMemPerNode`, or the nodes' memory less what the system keeps); "
                     "empty: not checked"),
    "max_cpus_per_job": (int, False, 0, "the most CPUs one job may have on a node, where the "
                         "centre caps it below the node's (e.g. 46 with 8 GPUs); 0: no cap"),
    "max_nodes": (int, False, 0, "the most nodes one job may have, or should use where the "
                  "centre advises it (1: single-node jobs only, e.g. nodes without a fast "
                  "network; job scripts for several nodes are then not shown for it); 0: "
                  "no limit"),
    "exclusive": (bool, False, None, "as `[cluster] exclusive`, for this partition only"),
    "ask_memory": (bool, False, None, "as `[cluster] ask_memory`, for this partition only"),
    "mem_option": (str, False, "mem", 'how jobs that must ask for memory ask for it: `"mem"` '
                   '(`--mem=` per node) or `"mem-per-gpu"` (`--mem-per-gpu=`)'),
}
ENVIRONMENT_KEYS = {
    "setup": (list, False, [], "the lines that set up the software environment in a job "
              "script, e.g. module loads; empty: the job scripts' own lines"),
    "modules": (list, False, [], "the modules the setup lines load (the tests generate "
                "them as an Lmod tree)"),
    "variables": (dict, False, {}, "variables every job script exports after the setup "
                  "lines, e.g. `{ NCCL_NET_GDR_LEVEL = \"3\" }`"),
    "nccl_socket_ifname": (str, False, "", "network interface NCCL/RCCL must use "
                           "(exported as `NCCL_SOCKET_IFNAME`); empty: leave NCCL to choose"),
    "container_image": (str, False, "", "the container image PyTorch runs in, e.g. a `.sif` "
                        "file (exported as `CONTAINER`); empty: no container"),
    "container_exec": (str, False, "", "the command that runs a program inside the image, "
                       "written before the image, e.g. `\"singularity exec --bind /scratch\"`: "
                       "every `python`, `torchrun`, `accelerate` and `deepspeed` command of "
                       "the job scripts runs through it"),
    "notes": (list, False, [], "sentences shown on the Your cluster page"),
    "torch": (str, False, "", "the release of PyTorch the setup lines give, e.g. `\"2.1.2\"` "
              "for a PyTorch module or container; empty: the reader's own virtual "
              "environment, made from the guide's `requirements.txt` (the release the guide "
              "pins, and every package it needs)"),
    "packages": (list, False, [], "with `torch`: the other Python packages the environment "
                 "provides, as pip names them, e.g. `[\"numpy\", \"deepspeed\"]`"),
}
SITE_KEYS = {
    "title": (str, False, "", "the site's title, e.g. `\"Distributed training on LUMI\"`; "
              "empty: the guide's own"),
    "logo": (str, False, "", "an image file shown above the navigation, relative to the "
             "profile; empty: none"),
    "links": (dict, False, {}, "links in the site's header back to the centre's pages, "
              "e.g. `{ \"User guide\" = \"https://...\" }`"),
}
ABOUT_KEYS = {
    "sources": (list, False, [], "where the profile's facts come from, each with the date it "
                "was read, e.g. `\"docs.example.org/jobs, read 2026-11-27\"`"),
    "unconfirmed": (list, False, [], "keys whose values are placeholders or guesses to "
                    "confirm on the real system before publishing, e.g. "
                    "`[\"cluster.account\", \"environment.modules\"]`"),
}
TOP_KEYS = {"cluster": dict, "partitions": list, "environment": dict, "site": dict,
            "about": dict}
#: Each table of a profile, as it is written, with its keys.
TABLES = (("[cluster]", CLUSTER_KEYS), ("[[partitions]]", PARTITION_KEYS),
          ("[environment]", ENVIRONMENT_KEYS), ("[site]", SITE_KEYS),
          ("[about]", ABOUT_KEYS))
VENDORS = ("nvidia", "amd")
MEM_OPTIONS = ("mem", "mem-per-gpu")
_RELEASE = re.compile(r"\d+\.\d+(\.\d+)?")
#: A container image named by its file (the job scripts add it after the command).
_IMAGE = re.compile(r"\S+\.(sif|sqsh|squashfs|simg|img)\b")
GPU_OPTIONS = ("gpus-per-node", "gres")
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
               dict: "a table"}
_MEM = re.compile(r"^(\d+)([KMGT]?)$")
#: A Slurm partition or node feature name.
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A binding with one CPU list per task: ``mask_cpu:0xfe,0xfe00`` or ``map_cpu:1,9``.
_BIND_LIST = re.compile(r"(?:verbose,)?(mask|map)_cpu:(\S+)")


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
        if kind is dict and not all(isinstance(item, str) for item in value.values()):
            raise ProfileError(f"{where}: {prefix}{key} must be a table of strings, "
                               f'e.g. {{ NAME = "value" }}')
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
    for key, allowed in (("gpu_vendor", VENDORS), ("gpu_option", GPU_OPTIONS)):
        if cluster[key] not in allowed:
            raise ProfileError(f"{where}: cluster.{key} is {cluster[key]!r}, "
                               f"expected one of {', '.join(map(repr, allowed))}")
    if not data.get("partitions"):
        raise ProfileError(f"{where}: missing partition: expected at least one [[partitions]] "
                           f"table (the first is the one the pages show first)")
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
        if part["mem_per_node"] and not _MEM.match(part["mem_per_node"]):
            raise ProfileError(f"{where}: {prefix}mem_per_node is {part['mem_per_node']!r}, "
                               f"expected megabytes or a number with K, M, G or T, e.g. \"500G\"")
        if part["mem_option"] not in MEM_OPTIONS:
            raise ProfileError(f"{where}: {prefix}mem_option is {part['mem_option']!r}, "
                               f"expected one of {', '.join(map(repr, MEM_OPTIONS))}")
        for key in ("max_cpus_per_job", "max_nodes"):
            if part[key] < 0:
                raise ProfileError(f"{where}: {prefix}{key} is {part[key]}, expected 0 "
                                   f"(no limit) or more")
        partition = Partition(**part | {"features": tuple(part["features"])})
        _check_node(where, prefix, partition)
        partitions.append(partition)
    keys = [p.key for p in partitions]
    if len(set(keys)) != len(keys):
        raise ProfileError(f"{where}: partitions: a partition name appears twice in {keys} "
                           f"(one name twice needs a different gpu_type each)")
    if len({p.name for p in partitions if p.default}) > 1:
        raise ProfileError(f"{where}: partitions: more than one has default = true")
    env = _check_table(where, data.get("environment", {}), ENVIRONMENT_KEYS, "environment.")
    bad = [name for name in env["variables"] if not _VARIABLE.fullmatch(name)]
    if bad:
        raise ProfileError(f"{where}: environment.variables has {bad[0]!r}, expected a "
                           f"shell variable name (letters, digits, _)")
    if bool(env["container_image"]) != bool(env["container_exec"]):
        raise ProfileError(f"{where}: environment.container_image and "
                           f"environment.container_exec go together: give both or neither")
    image = _IMAGE.search(env["container_exec"])
    if image or env["container_image"] and env["container_image"] in env["container_exec"]:
        named = image[0] if image else env["container_image"]
        raise ProfileError(f"{where}: environment.container_exec names the image "
                           f"{named!r}: give the command alone (the job scripts add "
                           f"$CONTAINER, the image of container_image, after it)")
    if env["torch"] and not _RELEASE.fullmatch(env["torch"]):
        raise ProfileError(f"{where}: environment.torch is {env['torch']!r}, expected a "
                           f"release of PyTorch such as \"2.1.2\"")
    if env["packages"] and not env["torch"]:
        raise ProfileError(f"{where}: environment.packages needs environment.torch: name "
                           f"the release of PyTorch the setup lines give (without it, the "
                           f"reader's own environment has every package the guide needs)")
    if cluster["account_required"] and not data["cluster"].get("account", "").strip():
        raise ProfileError(f"{where}: cluster.account_required is true but cluster.account "
                           f"is not given: set account = \"<the example project name your "
                           f"documentation uses>\"")
    site = _check_table(where, data.get("site", {}), SITE_KEYS, "site.")
    if site["logo"] and not (path.parent / site["logo"]).is_file():
        raise ProfileError(f"{where}: site.logo is {site['logo']!r}, but there is no such "
                           f"file next to the profile")
    about = _check_table(where, data.get("about", {}), ABOUT_KEYS, "about.")
    profile = Profile(path=path, partitions=tuple(partitions), **cluster,
                      setup=tuple(env["setup"]), modules=tuple(env["modules"]),
                      variables=tuple(env["variables"].items()),
                      nccl_socket_ifname=env["nccl_socket_ifname"],
                      container_image=env["container_image"],
                      container_exec=env["container_exec"], notes=tuple(env["notes"]),
                      torch=env["torch"], packages=tuple(env["packages"]),
                      site_title=site["title"], site_logo=site["logo"],
                      site_links=tuple(site["links"].items()),
                      sources=tuple(about["sources"]),
                      unconfirmed=tuple(about["unconfirmed"]))
    for i, part in enumerate(partitions):
        if profile.exclusive_on(part) and part.refuses_whole_nodes:
            raise ProfileError(
                f"{where}: partitions[{i}]: GPU jobs take whole nodes (exclusive = true), "
                f"but a job may have at most {part.max_cpus_per_job} of a node's "
                f"{part.cpus_per_node} CPUs (partitions[{i}].max_cpus_per_job): set "
                f"exclusive = false in partitions[{i}], or check max_cpus_per_job and "
                f"cores_per_node")
    known = profile.values()
    unknown = [key for key in profile.unconfirmed if key not in known]
    if unknown:
        raise ProfileError(f"{where}: about.unconfirmed names {unknown[0]!r}, which the "
                           f"profile does not set (expected a key as written, e.g. "
                           f"\"cluster.account\" or \"partitions[0].mem_per_gpu\")")
    return profile


def _check_node(where: str, prefix: str, part: Partition) -> None:
    """What a node of the partition can hold: its GPUs' CPUs, and one binding per GPU."""
    if part.threads_per_core < 1 or part.cores_per_node < 0:
        raise ProfileError(f"{where}: {prefix}threads_per_core must be at least 1 and "
                           f"cores_per_node at least 0 (0: not given)")
    asked = part.cpus_per_gpu * part.gpus_per_node
    if part.max_cpus_per_job and asked > part.max_cpus_per_job:
        fits = part.max_cpus_per_job // part.gpus_per_node
        raise ProfileError(
            f"{where}: {prefix}cpus_per_gpu is {part.cpus_per_gpu}: {part.gpus_per_node} "
            f"GPUs would take {asked} CPUs, but a job may have at most "
            f"{part.max_cpus_per_job} ({prefix}max_cpus_per_job): " + (
                f"set cpus_per_gpu = {fits}" if fits else
                f"that is less than one CPU per GPU: check max_cpus_per_job"))
    memory = part.mem_per_gpu_mb * part.gpus_per_node
    if part.mem_per_node_mb and memory > part.mem_per_node_mb:
        raise ProfileError(
            f"{where}: {prefix}mem_per_gpu is {part.mem_per_gpu!r}: {part.gpus_per_node} "
            f"GPUs would take {memory} MB, but a job may have {part.mem_per_node_mb} MB "
            f"of a node ({prefix}mem_per_node {part.mem_per_node!r}): set mem_per_gpu = "
            f"\"{part.mem_per_node_mb // part.gpus_per_node}M\" or less")
    if part.cpus_per_node and asked > part.cpus_per_node:
        raise ProfileError(
            f"{where}: {prefix}cpus_per_gpu is {part.cpus_per_gpu}: {part.gpus_per_node} "
            f"GPUs would take {asked} CPUs, but a node has {part.cpus_per_node} "
            f"(cores_per_node {part.cores_per_node} x threads_per_core "
            f"{part.threads_per_core})")
    bind = _BIND_LIST.fullmatch(part.cpu_bind)
    if not bind:
        return
    lists = bind[2].split(",")
    if len(lists) != part.gpus_per_node:
        raise ProfileError(f"{where}: {prefix}cpu_bind has {len(lists)} {bind[1]} entries, "
                           f"expected one per GPU: {part.gpus_per_node}")
    try:
        cpus = [int(item, 16 if bind[1] == "mask" else 0) for item in lists]
    except ValueError:
        raise ProfileError(f"{where}: {prefix}cpu_bind has an entry that is not a "
                           f"{'hexadecimal mask' if bind[1] == 'mask' else 'CPU number'}: "
                           f"{bind[2]!r}") from None
    highest = max(cpu.bit_length() - 1 if bind[1] == "mask" else cpu for cpu in cpus)
    if bind[1] == "mask" and 0 in cpus:
        raise ProfileError(f"{where}: {prefix}cpu_bind has an empty mask")
    if part.cpus_per_node and highest >= part.cpus_per_node:
        raise ProfileError(f"{where}: {prefix}cpu_bind names CPU {highest}, but a node "
                           f"has CPUs 0 to {part.cpus_per_node - 1}")


# --- Rendering -----------------------------------------------------------------------------

_BEGIN = re.compile(r"^#>(cluster|environment)\b(.*)$")
_END = re.compile(r"^#<(cluster|environment)\s*$")
_SBATCH = re.compile(r"^(#SBATCH\s+--)([a-z-]+)(?:=(\S*))?(\s*)(#.*)?$")


def has_markers(text: str) -> bool:
    return any(_BEGIN.match(line) for line in text.splitlines())


def _set_value(line: str, value: str) -> str:
    """The #SBATCH line with a new value, its comment kept in its column when it fits."""
    m = _SBATCH.match(line)
    return _replace_head(line, f"{m[1]}{m[2]}={value}", m[5])


def _replace_head(line: str, head: str, comment: str | None) -> str:
    """``head`` (an ``#SBATCH`` option) in place of the line's, followed by ``comment`` in
    the column where the line's comment starts, when it fits."""
    if not comment:
        return head
    column = len(line) - len(_SBATCH.match(line)[5])
    return head + " " * max(1, column - len(head)) + comment


def _marker_attributes(args: str) -> dict[str, str]:
    """``gpus=node tasks=gpu`` of a ``#>cluster`` marker, as a dict."""
    return dict(re.findall(r"(\w+)=(\S+)", args))


#: A comment line of a cluster block that only the example cluster keeps: a centre's
#: profile says itself which partition and account its jobs need.
_HINT = re.compile(r"^# Your cluster may also need\b")


def _cluster_block(lines: list[str], args: str, profile: Profile, part: Partition,
                   where: str) -> list[str]:
    attrs = _marker_attributes(args)
    unknown = set(attrs) - {"gpus", "tasks"}
    if unknown or "gpus" not in attrs:
        raise ProfileError(f"{where}: marker '#>cluster{args}': expected "
                           f"'#>cluster gpus=node|N|0 tasks=gpu|N'")
    gpus = part.gpus_per_node if attrs["gpus"] == "node" else int(attrs["gpus"])
    nodes = max((int(n) for m in map(_SBATCH.match, lines) if m and m[2] == "nodes"
                 for n in re.findall(r"\d+", m[3] or "")), default=1)  # 2, or 1-2
    if not part.takes(nodes):
        raise TooManyNodes(f"{where}: asks for {nodes} nodes, but jobs on partition "
                           f"{profile.label(part)} use at most {part.max_nodes} "
                           f"(max_nodes)", nodes=nodes, partition=part)
    tasks = attrs.get("tasks", "")
    tasks_per_node = gpus if tasks == "gpu" else int(tasks) if tasks.isdigit() else 0
    values = {
        "partition": part.name,
        "account": profile.account,
        "mem": part.mem_for(gpus) if gpus else None,
        "mem-per-gpu": part.mem_per_gpu,
    }
    if gpus:
        values["gpus-per-node"] = part.gpu_request(gpus)
        if tasks == "gpu":
            values["ntasks-per-node"] = str(gpus)
        if tasks_per_node:
            values["cpus-per-task"] = str(gpus * part.cpus_per_gpu // tasks_per_node)
    out, seen = [], set()
    for line in lines:
        if _HINT.match(line) and not profile.is_default:
            continue
        m = _SBATCH.match(line)
        if m and m[2] == "exclusive" and part.refuses_whole_nodes:
            out.append(whole_node_refused(part))
            continue
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
            if m[2] == "gpus-per-node":
                line = _gpu_option(line, profile)
        out.append(line)
    wanted = []
    if not part.default:
        wanted.append(("partition", part.name))
    if profile.account_required:
        wanted.append(("account", profile.account))
    if gpus and profile.exclusive_on(part):
        wanted.append(("exclusive", None))
    if (gpus and profile.ask_memory_on(part)
            and not seen & {"mem", "mem-per-gpu", "mem-per-cpu"}):  # each excludes the others
        wanted.append((part.mem_option, values[part.mem_option]))
    out += [f"#SBATCH --{key}" + (f"={value}" if value is not None else "")
            for key, value in wanted if key not in seen]
    return out


def whole_node_refused(part: Partition) -> str:
    """The comment line that stands for a script's ``--exclusive`` on a partition where a
    job may not have a whole node's CPUs (:attr:`Partition.refuses_whole_nodes`)."""
    return (f"# No --exclusive here: it would ask for all {part.cpus_per_node} CPUs of a "
            f"node, and a job may have {part.max_cpus_per_job}")


def _gpu_option(line: str, profile: Profile) -> str:
    """A ``--gpus-per-node`` line in the cluster's style; where its comment names the
    other spelling (``or: --gres=gpu:a100:4``), that follows the value too."""
    m = _SBATCH.match(line)
    value = m[3]
    other = {"gpus-per-node": f"--gres=gpu:{value}", "gres": f"--gpus-per-node={value}"}
    comment = re.sub(r"--gres=gpu:[\w.:-]+", other[profile.gpu_option], m[5] or "")
    return _replace_head(line, f"#SBATCH {profile.ask_gpus(value)}", comment)


def _environment_block(lines: list[str], profile: Profile, part: Partition,
                       tasks: str) -> list[str]:
    out = list(profile.setup) if profile.setup else list(lines)
    if profile.container_image:
        out.append(_CONTAINER_LINE.format(profile.container_image))
    out += [f"export {name}={value}" for name, value in profile.variables]
    if profile.nccl_socket_ifname:
        out.append(f"export NCCL_SOCKET_IFNAME={profile.nccl_socket_ifname}"
                   "  # the network NCCL/RCCL use between nodes")
    if part.cpu_bind and tasks == "gpu":  # one CPU list per GPU's task
        out.append(f"export SLURM_CPU_BIND={part.cpu_bind}"
                   "  # srun binds each task to these cores")
    if out and not lines:
        out.append("")  # set apart from the script's own lines
    return out


#: What runs PyTorch: a command at the start of a line, after ``srun`` and its options,
#: after ``exec``, at the start of ``bash -c``'s command, or the program ``mpirun`` starts
#: (a backslash and a newline count as a space).
_SPACE = r"(?:[ \t]|\\\n)"
_PROGRAM = r"(?:python3?|torchrun|accelerate|deepspeed)(?=[ \t\n])"
_LAUNCH = re.compile(
    rf"(?m)(?:^[ \t]*|\bsrun(?:{_SPACE}+-\S+)*{_SPACE}+|\bexec{_SPACE}+|\bbash -c ['\"]"
    rf"|\bmpirun\b(?:[^\n]|\\\n)*?{_SPACE})(?<!#)({_PROGRAM})")
_CONTAINER_LINE = "export CONTAINER={}  # the container image PyTorch runs in"


def _in_container(text: str, profile: Profile) -> str:
    """Every command that runs PyTorch, run through the profile's container command;
    ``CONTAINER`` is exported where the script has no environment block to do it."""
    code = "\n".join(" " * len(line) if line.lstrip().startswith("#") else line
                     for line in text.split("\n"))  # comments blanked, offsets kept
    starts = [m.start(1) for m in _LAUNCH.finditer(code)]
    if not starts:
        return text
    for start in reversed(starts):
        text = f"{text[:start]}{profile.container_exec} $CONTAINER {text[start:]}"
    export = _CONTAINER_LINE.format(profile.container_image)
    if export not in text:  # after the #SBATCH lines
        lines = text.split("\n")
        last = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
        lines[last + 1:last + 1] = ["", export]
        text = "\n".join(lines)
    return text


def render(text: str, profile: Profile | None = None, where: str = "job script",
           partition: str | None = None) -> str:
    """The job script ``text`` for ``profile``'s ``partition`` (None: its first, the one
    the pages show first and the tests submit to), without its marker lines.

    Rule: A job script marks its cluster lines with `#>cluster` ... `#<cluster` and its
    software lines with `#>environment` ... `#<environment`. Fix: add the markers as the
    example in "Add a page, a snippet and its test" shows."""
    profile = profile or load()
    part = profile.partition_named(partition)
    if not has_markers(text):
        raise ProfileError(f"{where}: no '#>cluster' marker: a job script marks its cluster "
                           f"lines (CONTRIBUTING.md, 'Add a page, a snippet and its test')")
    out: list[str] = []
    block: list[str] | None = None
    kind = args = tasks = ""
    for number, line in enumerate(text.split("\n"), 1):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if block is not None:
                raise ProfileError(f"{where}:{number}: '#>{begin[1]}' inside '#>{kind}'")
            block, kind, args = [], begin[1], begin[2]
        elif end:
            if block is None or end[1] != kind:
                raise ProfileError(f"{where}:{number}: '#<{end[1]}' without its '#>{end[1]}'")
            if kind == "cluster":
                out += _cluster_block(block, args, profile, part, where)
                tasks = _marker_attributes(args).get("tasks", "")
            else:
                out += _environment_block(block, profile, part, tasks)
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ProfileError(f"{where}: '#>{kind}' without its '#<{kind}'")
    text = "\n".join(out)
    return _in_container(text, profile) if profile.container_exec else text


def render_file(path: str | Path, profile: Profile | None = None,
                partition: str | None = None) -> str:
    path = Path(path)
    return render(path.read_text(), profile, where=str(path), partition=partition)


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
    """A default as a profile would write it: ``true``, ``"myproject"``, ``[]``; a key
    that follows another where not set (None): ``as [cluster]``."""
    if value is None:
        return "as [cluster]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value).replace("'", '"')


def check_docs_text(p: Profile) -> str:
    """What a maintainer confirms before publishing the site for ``p``: its sources and
    every placeholder still in it."""
    lines = [f"{p.path}: {p.name}"]
    lines += ["Sources:", *(f"  {s}" for s in p.sources)] if p.sources else [
        "Sources: none named ([about] sources): say where each fact comes from"]
    found = p.placeholders()
    lines += ([f"{len(found)} value(s) to confirm on the real system before publishing:"]
              + [f"  {line}" for line in found]) if found else ["No placeholders."]
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--partition", help="with --render: for this partition (default: "
                        "the first)")
    parser.add_argument("--check-docs", action="store_true", help="list every value to "
                        "confirm on the real system before publishing, and the profile's "
                        "sources")
    parser.add_argument("--torch", action="store_true", help="print the release of PyTorch "
                        "the profile's environment gives (empty: the guide's own)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.keys:
        print(keys_text(), end="")
        return 0
    try:
        p = load(args.profile)
        if args.torch:
            print(p.torch)
            return 0
        if args.check_docs:
            print(check_docs_text(p), end="")
            return 0
        if args.render:
            job = Path(args.render)
            if not job.exists():
                job = ROOT / "snippets" / args.render
            print(render_file(job, p, args.partition), end="")
            return 0
    except (ProfileError, OSError) as error:
        print(error, file=sys.stderr)
        return 1
    parts = ", ".join(f"{q.name} ({q.gpus_per_node} GPUs per node)" for q in p.partitions)
    print(f"{p.path}: {p.name}, partitions {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
