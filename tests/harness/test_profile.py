"""harness/profile.py: centre profiles are checked, and job scripts follow them.

Every problem in a profile is one line naming the file, the key and what was expected;
the default profile renders every job script of snippets/ as the file itself without its
marker lines; other profiles change exactly the lines they own.
"""

import re
import subprocess
import tomllib
import sys
from pathlib import Path

import pytest

from harness import profile
from harness.launch import ROOT, SNIPPETS

JOB_SCRIPTS = sorted(SNIPPETS.rglob("*.sbatch"))
PROFILES = sorted((ROOT / "profiles").glob("*.toml"))
GOOD = (ROOT / "profiles" / "default.toml").read_text()


#: A job script's GPU request, in either spelling, with its count per node.
GPU_REQUEST = re.compile(r"^#SBATCH (?:--gpus-per-node=|--gres=gpu:)(?:\w+:)?(\d+)", re.M)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "centre.toml"
    path.write_text(text)
    return path


def test_the_four_profiles_load():
    assert {p.stem for p in PROFILES} >= {"default", "h100", "two_partitions", "amd"}
    shapes = {p.stem: profile.load(p) for p in PROFILES}
    assert shapes["default"].gpus_per_node == 4 and shapes["default"].partition.name == "gpu"
    assert shapes["amd"].gpus_per_node == 8 and shapes["amd"].gpu_vendor == "amd"
    assert len(shapes["two_partitions"].partitions) == 2
    assert shapes["h100"].partition.name == "gpu_h100" and shapes["h100"].exclusive


def test_the_centre_variable_chooses_the_profile(monkeypatch):
    monkeypatch.delenv(profile.ENV_VAR, raising=False)
    assert profile.load().is_default
    monkeypatch.setenv(profile.ENV_VAR, "profiles/h100.toml")  # relative to the top folder
    assert profile.load().partition.name == "gpu_h100"


@pytest.mark.parametrize("change, expected", [
    # A misspelt key.
    (lambda t: t.replace("gpus_per_node", "gpu_per_node"),
     r"unknown key partitions\[0\]\.gpu_per_node \(expected one of: name, gpus_per_node, "),
    (lambda t: t.replace("login_host", "login_hots"), r"unknown key cluster\.login_hots "),
    (lambda t: t + "\n[modules]\n", r"unknown key modules \(expected one of: cluster, "),
    # A wrong type.
    (lambda t: t.replace("gpus_per_node = 4", 'gpus_per_node = "4"'),
     r"partitions\[0\]\.gpus_per_node is '4', expected an integer$"),
    (lambda t: t.replace("exclusive = false", 'exclusive = "no"'),
     r"cluster\.exclusive is 'no', expected true or false$"),
    (lambda t: t.replace("gpus_per_node = 4", "gpus_per_node = true"),
     r"partitions\[0\]\.gpus_per_node is True, expected an integer$"),
    (lambda t: t.replace("setup = []", 'setup = "module load x"'),
     r"environment\.setup is 'module load x', expected a list$"),
    (lambda t: t.replace('features = ["a100", "ib"]', 'features = "ib"'),
     r"partitions\[0\]\.features is 'ib', expected a list$"),
    (lambda t: t.replace('features = ["a100", "ib"]', 'features = ["a100&ib"]'),
     r"partitions\[0\]\.features has 'a100&ib', expected Slurm feature names "),
    # A negative or zero count.
    (lambda t: t.replace("gpus_per_node = 4", "gpus_per_node = -4"),
     r"partitions\[0\]\.gpus_per_node is -4, expected a whole number of at least 1$"),
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 0"),
     r"partitions\[0\]\.cpus_per_gpu is 0, expected a whole number of at least 1$"),
    # A missing partition, table or key.
    (lambda t: t[:t.index("[[partitions]]")] + t[t.index("[environment]"):],
     r"missing partition: expected at least one \[\[partitions\]\] table"),
    (lambda t: t.replace('name = "gpu"\n', ""),
     r"missing key partitions\[0\]\.name \(expected a string\)$"),
    (lambda t: t.replace("[cluster]", "[centre]"), r"unknown key centre "),
    # Values Slurm would refuse.
    (lambda t: t.replace('mem_per_gpu = "60G"', 'mem_per_gpu = "60 GB"'),
     r"partitions\[0\]\.mem_per_gpu is '60 GB', expected megabytes or a number"),
    (lambda t: t.replace('name = "gpu"', 'name = "gpu nodes"'),
     r"partitions\[0\]\.name is 'gpu nodes', expected a Slurm partition name$"),
    (lambda t: t.replace("ask_memory = false", 'ask_memory = false\ngpu_vendor = "intel"'),
     r"cluster\.gpu_vendor is 'intel', expected one of 'nvidia', 'amd'$"),
    (lambda t: t.replace("[environment]", "[[partitions]]\n" + t[t.index("name = \"gpu\""):
                                                                t.index("[environment]")]
                         + "[environment]"),
     r"partitions: a partition name appears twice"),
    (lambda t: t.replace("[cluster]", "[cluster\n"), r"not valid TOML \("),
    # A key in the wrong table, a GPU type in the count, one bracket for two: each says where.
    (lambda t: t.replace('name = "gpu"', 'name = "gpu"\naccount_required = true'),
     r"unknown key partitions\[0\]\.account_required \(expected one of: .*; it belongs in "
     r"\[cluster\]\)$"),
    (lambda t: t.replace("gpus_per_node = 4", 'gpus_per_node = "A100:4"'),
     r"partitions\[0\]\.gpus_per_node is 'A100:4', expected an integer \(the GPU type goes "
     r"in gpu_type"),
    (lambda t: t.replace("[[partitions]]", "[partitions]"),
     r"partitions is written \[partitions\], expected \[\[partitions\]\], one table per "
     r"partition, with two brackets$"),
    (lambda t: t.replace("setup = []", "setup = []\ncpu_bind = \"mask_cpu:0x1\""),
     r"unknown key environment\.cpu_bind \(.*; it belongs in \[\[partitions\]\]\)$"),
    # What a node cannot hold: more CPUs than it has, a binding per GPU that is not one.
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 40\ncores_per_node = 64\n"
                         "threads_per_core = 2"),
     r"partitions\[0\]\.cpus_per_gpu is 40: 4 GPUs would take 160 CPUs, but a node has 128 "
     r"\(cores_per_node 64 x threads_per_core 2\)$"),
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 8\ncpu_bind = "
                         "\"mask_cpu:0xff,0xff00,0xff0000,0xff000000,0xff00000000\""),
     r"partitions\[0\]\.cpu_bind has 5 mask entries, expected one per GPU: 4$"),
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 8\ncores_per_node = 32\n"
                         "cpu_bind = \"map_cpu:0,8,16,40\""),
     r"partitions\[0\]\.cpu_bind names CPU 40, but a node has CPUs 0 to 31$"),
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 8\ncpu_bind = \"mask_cpu:0xff,0x0,0xg,0x1\""),
     r"partitions\[0\]\.cpu_bind has an entry that is not a hexadecimal mask"),
    (lambda t: t.replace("ask_memory = false", 'ask_memory = false\ngpu_option = "gpus"'),
     r"cluster\.gpu_option is 'gpus', expected one of 'gpus-per-node', 'gres'$"),
    (lambda t: t.replace("setup = []", 'setup = []\nvariables = { "NCCL-X" = "1" }'),
     r"environment\.variables has 'NCCL-X', expected a shell variable name"),
    (lambda t: t.replace("setup = []", "setup = []\nvariables = { NCCL_X = 1 }"),
     r"environment\.variables must be a table of strings"),
    # A rule that needs another key: an account to name, a release for the packages.
    (lambda t: t.replace('account = "myproject"\n', "").replace(
        "account_required = false", "account_required = true"),
     r"cluster\.account_required is true but cluster\.account is not given: set account = "),
    (lambda t: t.replace('account = "myproject"', 'account = ""').replace(
        "account_required = false", "account_required = true"),
     r"cluster\.account_required is true but cluster\.account is not given"),
    (lambda t: t.replace("setup = []", 'setup = []\npackages = ["numpy"]'),
     r"environment\.packages needs environment\.torch: name the release of PyTorch the "
     r"setup lines give"),
    # A container command that names the image itself, by its file or as container_image.
    (lambda t: t.replace("setup = []", 'setup = []\ncontainer_image = "/images/pytorch.sif"\n'
                         'container_exec = "apptainer exec /images/pytorch.sif"'),
     r"environment\.container_exec names the image '/images/pytorch\.sif': give the command "
     r"alone \(the job scripts add \$CONTAINER, the image of container_image, after it\)$"),
    (lambda t: t.replace("setup = []", 'setup = []\ncontainer_image = "/images/torch"\n'
                         'container_exec = "podman run /images/torch"'),
     r"environment\.container_exec names the image '/images/torch': give the command alone"),
    # A release of PyTorch that is not one.
    (lambda t: t.replace("setup = []", 'setup = []\ntorch = "latest"'),
     r"environment\.torch is 'latest', expected a release of PyTorch such as \"2\.1\.2\"$"),
    (lambda t: t.replace("setup = []", 'setup = []\ntorch = "2.1.2+cu121"'),
     r"environment\.torch is '2\.1\.2\+cu121', expected a release of PyTorch"),
    (lambda t: t.replace("setup = []", "setup = []\ntorch = 2.1"),
     r"environment\.torch is 2\.1, expected a string$"),
    # What a job on the partition may not have: more CPUs or memory than the centre lets
    # one job have on a node.
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 8\nmax_cpus_per_job = 30"),
     r"partitions\[0\]\.cpus_per_gpu is 8: 4 GPUs would take 32 CPUs, but a job may have at "
     r"most 30 \(partitions\[0\]\.max_cpus_per_job\): set cpus_per_gpu = 7$"),
    (lambda t: t.replace("cpus_per_gpu = 8", "cpus_per_gpu = 8\nmax_cpus_per_job = 3"),
     r"but a job may have at most 3 \(partitions\[0\]\.max_cpus_per_job\): that is less "
     r"than one CPU per GPU: check max_cpus_per_job$"),
    # Whole nodes where a job may not have a whole node's CPUs.
    (lambda t: t.replace("exclusive = false", "exclusive = true").replace(
        "cpus_per_gpu = 8", "cpus_per_gpu = 8\ncores_per_node = 48\nmax_cpus_per_job = 46"),
     r"partitions\[0\]: GPU jobs take whole nodes \(exclusive = true\), but a job may have "
     r"at most 46 of a node's 48 CPUs \(partitions\[0\]\.max_cpus_per_job\): set exclusive "
     r"= false in partitions\[0\], or check max_cpus_per_job and cores_per_node$"),
    (lambda t: t.replace('mem_per_gpu = "60G"', 'mem_per_gpu = "60G"\nmem_per_node = "200G"'),
     r"partitions\[0\]\.mem_per_gpu is '60G': 4 GPUs would take 245760 MB, but a job may "
     r"have 204800 MB of a node \(partitions\[0\]\.mem_per_node '200G'\): set mem_per_gpu = "
     r"\"51200M\" or less$"),
    # Limits Slurm could not read.
    (lambda t: t.replace('mem_per_gpu = "60G"', 'mem_per_gpu = "60G"\nmem_per_node = "500 GB"'),
     r"partitions\[0\]\.mem_per_node is '500 GB', expected megabytes or a number with K, M, "
     r"G or T, e\.g\. \"500G\"$"),
    (lambda t: t.replace('name = "gpu"', 'name = "gpu"\nmem_option = "mem_per_gpu"'),
     r"partitions\[0\]\.mem_option is 'mem_per_gpu', expected one of 'mem', 'mem-per-gpu'$"),
    (lambda t: t.replace('name = "gpu"', 'name = "gpu"\nmax_nodes = -1'),
     r"partitions\[0\]\.max_nodes is -1, expected 0 \(no limit\) or more$"),
    (lambda t: t.replace('name = "gpu"', 'name = "gpu"\nmax_cpus_per_job = -46'),
     r"partitions\[0\]\.max_cpus_per_job is -46, expected 0 \(no limit\) or more$"),
    (lambda t: t.replace('name = "gpu"', 'name = "gpu"\nexclusive = "yes"'),
     r"partitions\[0\]\.exclusive is 'yes', expected true or false$"),
    # [about] names a key the profile does not write; [site] a logo that is not there.
    (lambda t: t + '\n[about]\nunconfirmed = ["cluster.acount"]\n',
     r"about\.unconfirmed names 'cluster\.acount', which the profile does not set \(expected "
     r"a key as written, e\.g\. \"cluster\.account\""),
    (lambda t: t + '\n[about]\nunconfirmed = ["partitions[0].max_nodes"]\n',
     r"about\.unconfirmed names 'partitions\[0\]\.max_nodes', which the profile does not set"),
    (lambda t: t + '\n[site]\nlogo = "logo.png"\n',
     r"site\.logo is 'logo\.png', but there is no such file next to the profile$"),
    (lambda t: t + '\n[site]\nlinks = { "User guide" = 1 }\n',
     r"site\.links must be a table of strings"),
    (lambda t: t + '\n[about]\nsource = ["x"]\n',
     r"unknown key about\.source \(expected one of: sources, unconfirmed\)$"),
])
def test_a_bad_profile_is_one_line_naming_file_key_and_expectation(tmp_path, change, expected):
    path = write(tmp_path, change(GOOD))
    with pytest.raises(profile.ProfileError) as error:
        profile.load(path)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    assert re.search(expected, message), message


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(profile.ProfileError, match=r"centre\.toml: cannot read the profile"):
        profile.load(tmp_path / "centre.toml")


def test_the_build_stops_with_that_line(tmp_path):
    """conf.py loads the profile: a bad one stops sphinx-build before it reads a page."""
    path = write(tmp_path, GOOD.replace("gpus_per_node = 4", "gpus_per_node = -1"))
    built = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "docs",
                            str(tmp_path / "html")], cwd=ROOT, capture_output=True, text=True,
                           env={"CENTRE": str(path), "PATH": "/usr/bin:/bin"}, timeout=120)
    if "No module named sphinx" in built.stderr:  # a GPU machine's own Python, say
        pytest.skip("needs Sphinx (requirements.txt)")
    assert built.returncode != 0
    assert (f"{path}: partitions[0].gpus_per_node is -1, expected a whole number of at "
            f"least 1\n") in built.stderr


@pytest.mark.parametrize("script", JOB_SCRIPTS, ids=lambda p: p.name)
def test_the_default_profile_shows_each_job_script_as_it_is(script):
    text = script.read_text()
    assert profile.has_markers(text)
    unmarked = "".join(line for line in text.splitlines(keepends=True)
                       if not re.match(r"#[<>](cluster|environment)\b", line))
    assert profile.render(text, profile.load(ROOT / "profiles" / "default.toml")) == unmarked


@pytest.mark.parametrize("centre", PROFILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("script", JOB_SCRIPTS, ids=lambda p: p.name)
def test_every_profile_renders_every_job_script_for_each_partition(script, centre):
    """No marker survives, the partition is asked for (or is the default), and a script
    that takes every GPU of a node asks for that partition's; a script for more nodes
    than a job on the partition may have is not rendered for it (the pages say why)."""
    p = profile.load(centre)
    nodes = int((re.search(r"^#SBATCH --nodes=(\d+)", script.read_text(), re.M) or [0, 1])[1])
    for part in p.partitions:
        if not part.takes(nodes):
            with pytest.raises(profile.TooManyNodes, match=f"asks for {nodes} nodes"):
                profile.render_file(script, p, p.label(part))
            continue
        text = profile.render_file(script, p, p.label(part))
        assert not re.search(r"^#[<>]", text, re.M)
        asks = re.search(rf"^#SBATCH --partition={part.name}(\s|$)", text, re.M)
        assert bool(asks) != (part.default and not re.search(
            r"^#SBATCH --partition=", script.read_text(), re.M))
        if "#>cluster gpus=node" in script.read_text():
            asked = GPU_REQUEST.search(text)
            assert int(asked[1]) == part.gpus_per_node, (part.name, asked[0])
    assert profile.render_file(script, p) == profile.render_file(script, p, p.label(p.partition))


def test_the_h100_profile_changes_the_lines_it_owns():
    h100 = profile.load(ROOT / "profiles" / "h100.toml")
    text = profile.render_file(SNIPPETS / "slurm" / "anatomy.sbatch", h100)
    assert "#SBATCH --ntasks-per-node=4     # processes per node: one per GPU\n" in text
    assert "#SBATCH --gpus-per-node=h100:4  # GPUs per node" in text
    assert "#SBATCH --cpus-per-task=16      # CPU cores per process" in text
    assert "#SBATCH --mem=480G              # memory per node" in text
    assert "#SBATCH --partition=gpu_h100    # the queue" in text
    assert "#SBATCH --account=p_myproject   # the project" in text
    assert "#SBATCH --exclusive\n#SBATCH --output" in text
    # in place of the script's own line, source .venv/bin/activate
    assert "\nmodule purge\nmodule load pytorch/2.4.1 scikit-learn/1.5.2\nexport OMP" in text
    assert ".venv" not in text
    torchrun = profile.render_file(SNIPPETS / "slurm" / "one_node_torchrun.sbatch", h100)
    assert "#SBATCH --ntasks-per-node=1\n" in torchrun  # one torchrun per node...
    assert "#SBATCH --cpus-per-task=64\n" in torchrun  # ...with every core of the node


def test_the_amd_profile_binds_cpus_and_names_the_network():
    amd = profile.load(ROOT / "profiles" / "amd.toml")
    text = profile.render_file(SNIPPETS / "slurm" / "multi_node.sbatch", amd)
    assert "#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n" in text
    assert "#SBATCH --cpus-per-task=7\n" in text
    assert "\nexport NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3 " in text
    assert "\nexport SLURM_CPU_BIND=mask_cpu:" in text


def test_two_partitions_ask_for_memory_of_the_first():
    twin = profile.load(ROOT / "profiles" / "two_partitions.toml")
    text = profile.render_file(SNIPPETS / "slurm" / "one_node.sbatch", twin)
    assert "#SBATCH --gpus-per-node=a100:4\n#SBATCH --cpus-per-task=7\n" in text
    assert "#SBATCH --mem=250000M\n" in text
    assert "--partition" not in text  # ml is the cluster's default partition


def test_the_hardware_script_asks_for_the_partitions_type_and_feature_where_it_has_them():
    """A request that names a GPU type names the profile's (its --gres spelling in the
    comment too), --constraint asks for the last feature and goes without one, and a
    script that asks for memory per GPU gets no --mem besides."""
    def render(name):
        return profile.render_file(SNIPPETS / "slurm" / "hardware.sbatch",
                                   profile.load(ROOT / "profiles" / f"{name}.toml"))
    h100 = render("h100")
    assert "#SBATCH --gpus-per-node=h100:4    # or: --gres=gpu:h100:4\n" in h100
    assert "#SBATCH --constraint=ib           # only nodes" in h100
    amd = render("amd")
    assert "#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8         # or: --gres=gpu:8\n" in amd
    assert "--constraint" not in amd  # its nodes have no features
    twin = render("two_partitions")
    assert "#SBATCH --mem-per-gpu=62500M" in twin and "--mem=" not in twin  # they exclude
    assert "#SBATCH --mem-per-gpu=120G        # host memory for each GPU" in h100
    # The default partition has a type its other jobs do not name.
    default = profile.load(ROOT / "profiles" / "default.toml")
    assert default.partition.gpu_request() == "4"
    assert default.partition.gpu_request(typed=True) == "a100:4"


def test_a_script_asks_for_no_whole_node_where_a_job_may_not_have_its_cpus(tmp_path):
    """ZIH's Alpha Centauri lets a job have 46 of a node's 48 CPUs: the hardware page's
    ``--exclusive``, which would ask for all 48, gives way to a comment line that says
    why, and the job asks for the rest as elsewhere. Where the node's CPUs are not given,
    or the cap is the node's, the line stays."""
    zih = profile.load(ROOT / "profiles" / "zih-alpha.toml")
    assert zih.partition.refuses_whole_nodes
    text = profile.render_file(SNIPPETS / "slurm" / "hardware.sbatch", zih)
    assert not re.search(r"^#SBATCH --exclusive", text, re.M)
    assert ("#SBATCH --gres=gpu:8              # or: --gpus-per-node=8\n"
            "# No --exclusive here: it would ask for all 48 CPUs of a node, and a job may "
            "have 46\n#SBATCH --mem-per-gpu=123750M ") in text
    for cap in ("cores_per_node = 32", "cores_per_node = 32\nmax_cpus_per_job = 32",
                "max_cpus_per_job = 32"):
        other = profile.load(write(tmp_path, GOOD.replace("cpus_per_gpu = 8",
                                                          f"cpus_per_gpu = 8\n{cap}")))
        assert not other.partition.refuses_whole_nodes, cap
        assert "\n#SBATCH --exclusive " in profile.render_file(
            SNIPPETS / "slurm" / "hardware.sbatch", other), cap


# --- Rules per partition ------------------------------------------------------------------

#: A cluster whose rules differ by partition: GPU jobs take whole nodes and ask for their
#: memory, except on gpu, which shares nodes and caps a job's CPUs and memory; single
#: takes jobs of one node only, and they ask for memory per GPU.
RULES = GOOD.replace("exclusive = false", "exclusive = true").replace(
    "ask_memory = false", "ask_memory = true").replace(
    'description = "the GPU nodes"', 'description = "the GPU nodes"\nexclusive = false\n'
    'ask_memory = false\nmax_cpus_per_job = 32\nmem_per_node = "250G"') + """
[[partitions]]
name = "single"
gpus_per_node = 4
cpus_per_gpu = 8
mem_per_gpu = "60G"
max_nodes = 1
mem_option = "mem-per-gpu"
description = "nodes without a fast network"
"""
#: The cluster lines of a job script of one node with every GPU, asking for ``extra``.
BLOCK = "#>cluster gpus=node tasks=gpu\n#SBATCH --nodes={nodes}\n{extra}#<cluster\nsrun hostname\n"


def test_a_partition_takes_whole_nodes_and_asks_for_memory_as_it_says_else_as_the_cluster(
        tmp_path):
    rules = profile.load(write(tmp_path, RULES))
    gpu, single = rules.partitions
    assert (rules.exclusive, rules.ask_memory) == (True, True)
    assert (rules.exclusive_on(gpu), rules.ask_memory_on(gpu)) == (False, False)
    assert (rules.exclusive_on(single), rules.ask_memory_on(single)) == (True, True)
    shared = profile.render_file(SNIPPETS / "slurm" / "one_node.sbatch", rules, "gpu")
    assert "--exclusive" not in shared and not re.search(r"^#SBATCH --mem", shared, re.M)
    whole = profile.render_file(SNIPPETS / "slurm" / "one_node.sbatch", rules, "single")
    assert ("#SBATCH --time=00:10:00\n#SBATCH --partition=single\n#SBATCH --exclusive\n"
            "#SBATCH --mem-per-gpu=60G\n#SBATCH --output") in whole  # mem_option
    assert "--mem=" not in whole
    per_node = profile.load(write(tmp_path, RULES.replace('mem_option = "mem-per-gpu"\n', "")))
    text = profile.render_file(SNIPPETS / "slurm" / "one_node.sbatch", per_node, "single")
    assert "#SBATCH --exclusive\n#SBATCH --mem=240G\n" in text and "--mem-per-gpu" not in text


@pytest.mark.parametrize("option", profile.MEM_OPTIONS)
def test_a_script_that_asks_for_memory_itself_gets_no_second_memory_line(tmp_path, option):
    """Its own line, recomputed where the profile knows the value, is the only one: the
    options exclude one another."""
    rules = profile.load(write(tmp_path, RULES.replace('"mem-per-gpu"', f'"{option}"')))
    for asked, rendered in (("--mem=8G", "--mem=240G"), ("--mem-per-gpu=8G", "--mem-per-gpu=60G"),
                            ("--mem-per-cpu=2G", "--mem-per-cpu=2G")):
        text = profile.render(BLOCK.format(nodes=1, extra=f"#SBATCH {asked}\n"), rules,
                              partition="single")
        assert re.findall(r"^#SBATCH --mem\S*", text, re.M) == [f"#SBATCH {rendered}"], text


def test_a_job_for_more_nodes_than_a_partition_allows_is_not_rendered_for_it(tmp_path, capsys):
    path = write(tmp_path, RULES)
    rules = profile.load(path)
    script = SNIPPETS / "slurm" / "multi_node.sbatch"
    assert "#SBATCH --nodes=2" in profile.render_file(script, rules, "gpu")
    with pytest.raises(profile.TooManyNodes) as error:
        profile.render_file(script, rules, "single")
    assert str(error.value) == (f"{script}: asks for 2 nodes, but jobs on partition single "
                                f"use at most 1 (max_nodes)")
    assert (error.value.nodes, error.value.partition) == (2, rules.partitions[1])
    assert "#SBATCH --partition=single" in profile.render_file(
        SNIPPETS / "slurm" / "one_node.sbatch", rules, "single")
    # A range of nodes counts by its largest, as Slurm's limit does (it refuses --nodes=1-2
    # on a partition of MaxNodes=1).
    with pytest.raises(profile.TooManyNodes, match="asks for 2 nodes"):
        profile.render(BLOCK.format(nodes="1-2", extra=""), rules, partition="single")
    assert [p.name for p in rules.partitions if p.takes(2)] == ["gpu"]
    assert all(p.takes(1) for p in rules.partitions)
    # On the command line: the one line, and exit status 1.
    assert profile.main([str(path), "--render", "slurm/multi_node.sbatch",
                         "--partition", "single"]) == 1
    assert capsys.readouterr().err == f"{error.value}\n"


def test_the_values_to_confirm_before_publishing_are_listed(tmp_path, capsys):
    """``--check-docs``: the sources, then the keys [about] names and the values that look
    like examples; ``--torch``: the environment's release."""
    path = write(tmp_path, GOOD.replace("setup = []", 'setup = ["module load PyTorch/2.1.2"]\n'
                                        'torch = "2.1.2"\npackages = ["numpy"]') +
                 '\n[about]\nsources = ["hpc.uni.de/jobs, read 2026-11-27"]\n'
                 'unconfirmed = ["cluster.account", "partitions[0].mem_per_gpu"]\n')
    centre = profile.load(path)
    assert (centre.torch, centre.packages) == ("2.1.2", ("numpy",))
    assert centre.placeholders() == [
        'cluster.account = "myproject": listed in [about] unconfirmed',
        'partitions[0].mem_per_gpu = "60G": listed in [about] unconfirmed',
        'cluster.login_host = "login.cluster.example.org": looks like an example']
    assert profile.main([str(path), "--check-docs"]) == 0
    assert capsys.readouterr().out == (
        f"{path}: the example cluster\nSources:\n  hpc.uni.de/jobs, read 2026-11-27\n"
        f"3 value(s) to confirm on the real system before publishing:\n"
        + "".join(f"  {line}\n" for line in centre.placeholders()))
    assert profile.main([str(path), "--torch"]) == 0
    assert capsys.readouterr().out == "2.1.2\n"
    plain = write(tmp_path, GOOD.replace("login.cluster.example.org", "login.uni.de"))
    assert profile.main([str(plain), "--check-docs"]) == 0
    assert capsys.readouterr().out == (
        f"{plain}: the example cluster\nSources: none named ([about] sources): say where "
        f"each fact comes from\nNo placeholders.\n")
    assert profile.main([str(plain), "--torch"]) == 0
    assert capsys.readouterr().out == "\n"  # the guide's own release


@pytest.mark.parametrize("text, expected", [
    ("#!/bin/bash\n#SBATCH --nodes=1\nsrun hostname\n",
     r"^x\.sbatch: no '#>cluster' marker: a job script marks its cluster lines"),
    ("#>cluster gpus=node tasks=gpu\n#SBATCH --nodes=1\n", r"'#>cluster' without its '#<cluster'"),
    ("#>cluster tasks=gpu\n#<cluster\n", r"expected '#>cluster gpus=node\|N\|0 tasks=gpu\|N'"),
    ("#>cluster gpus=node\n#<environment\n", r"x\.sbatch:2: '#<environment' without its"),
])
def test_a_job_script_with_missing_or_broken_markers_fails_clearly(text, expected):
    with pytest.raises(profile.ProfileError, match=expected):
        profile.render(text, profile.load(ROOT / "profiles" / "default.toml"), where="x.sbatch")


def test_the_keys_and_a_rendered_job_script_print_without_building_the_site():
    """The reference an administrator reads before the site exists: every key of every
    table, and a job script as a profile renders it."""
    keys = subprocess.run([sys.executable, "-m", "harness.profile", "--keys"], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=60).stdout
    for _, table in profile.TABLES:
        for key in table:
            assert re.search(rf"(?m)^  {key} \((a string|an integer|true or false|a list|"
                             rf"a table), ", keys)
    assert "  gpus_per_node (an integer, required): " in keys
    rendered = subprocess.run(
        [sys.executable, "-m", "harness.profile", "profiles/h100.toml", "--render",
         "quickstart/one_node.sbatch"], cwd=ROOT, capture_output=True, text=True, check=True,
        timeout=60).stdout
    assert rendered == profile.render_file(ROOT / "snippets/quickstart/one_node.sbatch",
                                           profile.load(ROOT / "profiles/h100.toml"))
    assert "#SBATCH --partition=gpu_h100" in rendered


#: A profile with the keys the shipped ones leave out: GPUs asked for with --gres, the
#: node's cores and threads, a binding per GPU and variables every job exports.
FULL = GOOD.replace('ask_memory = false', 'ask_memory = false\ngpu_option = "gres"').replace(
    "cpus_per_gpu = 8", "cpus_per_gpu = 8\ncores_per_node = 32\nthreads_per_core = 2\n"
    'cpu_bind = "map_cpu:0,8,16,24"').replace(
    "setup = []", 'setup = ["module load pytorch/2.13"]\n'
    'variables = { NCCL_NET_GDR_LEVEL = "3", MIOPEN_USER_DB_PATH = "/tmp/$USER-miopen" }')


def test_a_gres_cluster_asks_for_gpus_with_gres_and_names_the_other_spelling(tmp_path):
    full = profile.load(write(tmp_path, FULL))
    anatomy = profile.render_file(SNIPPETS / "slurm" / "anatomy.sbatch", full)
    assert ("#SBATCH --gres=gpu:4            # GPUs per node (on some clusters: "
            "--gpus-per-node=4)\n") in anatomy
    assert "--gpus-per-node=4 " not in anatomy
    hardware = profile.render_file(SNIPPETS / "slurm" / "hardware.sbatch", full)
    assert "#SBATCH --gres=gpu:a100:4         # or: --gpus-per-node=a100:4\n" in hardware
    one_node = profile.render_file(SNIPPETS / "quickstart" / "one_node.sbatch", full)
    assert "#SBATCH --gres=gpu:4\n" in one_node


def test_variables_follow_the_setup_and_binding_only_where_each_gpu_has_its_task(tmp_path):
    """The masks or CPU lists are one per GPU: a script with one torchrun per node (one
    task for every GPU of the node) or without GPUs gets none."""
    full = profile.load(write(tmp_path, FULL))
    exports = ("module load pytorch/2.13\nexport NCCL_NET_GDR_LEVEL=3\n"
               "export MIOPEN_USER_DB_PATH=/tmp/$USER-miopen\n")
    per_gpu = profile.render_file(SNIPPETS / "slurm" / "one_node.sbatch", full)
    assert exports + "export SLURM_CPU_BIND=map_cpu:0,8,16,24 " in per_gpu
    for name in ("slurm/one_node_torchrun.sbatch", "quickstart/two_nodes.sbatch"):
        text = profile.render_file(SNIPPETS / name, full)
        assert "SLURM_CPU_BIND" not in text, name
        assert "export NCCL_NET_GDR_LEVEL=3\n" in text, name
    amd = profile.load(ROOT / "profiles" / "amd.toml")
    assert "SLURM_CPU_BIND" in profile.render_file(SNIPPETS / "slurm/multi_node.sbatch", amd)
    assert "SLURM_CPU_BIND" not in profile.render_file(
        SNIPPETS / "slurm/multi_node_torchrun.sbatch", amd)


# --- Comments follow the profile ------------------------------------------------------------

_COMMENT = re.compile(r"^#(?![!<>]|SBATCH)(.*)$|^#SBATCH[^#]*#(.*)$|^[^#\n]*\s#\s(.*)$", re.M)


def comments(text: str) -> str:
    """Every comment of a job script, the ``#SBATCH`` lines' included, one per line."""
    return "\n".join(next(g for g in m.groups() if g is not None) for m in _COMMENT.finditer(text))


def contradictions(text: str, centre: profile.Profile) -> list[str]:
    """What the comments of a rendered job script say that its lines or the profile make
    false: a GPU count it does not ask for, memory it does not ask for, a partition or
    account it already names (or another partition), a virtual environment it does not
    activate, module lines other than the profile's."""
    found = []
    said = comments(text)
    gpus = GPU_REQUEST.search(text)
    nodes = int((re.search(r"^#SBATCH --nodes=(\d+)", text, re.M) or [0, 1])[1])
    if gpus:
        allowed = {1, int(gpus[1]), nodes * int(gpus[1])}  # no partition has fewer than 1
        found += [f"{n} GPU" for n in re.findall(r"\b(\d+) GPUs?\b", said) if int(n) not in allowed]
    memory = set(re.findall(r"^#SBATCH --mem(?:-per-gpu)?=(\S+)", text, re.M))
    found += [f"{n}{u} of memory" for n, u in re.findall(r"\b(\d+) ?(GB|G)\b", said)
              if f"{n}G" not in memory]
    for key in ("partition", "account"):
        if re.search(rf"^#SBATCH --{key}=", text, re.M) and re.search(rf"--{key}=\.\.\.", said):
            found.append(f"a hint to add --{key}, which the script has")
    names = {p.name for p in centre.partitions}
    found += [f"partition {name}" for name in re.findall(r"--partition=(\w[\w.-]*)", said)
              if name not in names]
    if ".venv" in said and not re.search(r"^[^#\n]*\.venv/bin/activate", text, re.M):
        found.append("a .venv the script does not activate")
    if centre.setup:
        found += [f"module line {line.strip()!r}" for line in re.findall(
            r"module load [^\n]*", said) if line.strip() not in centre.setup]
    return found


#: Profiles the comments are checked against: the shipped ones and one with every key.
def comment_profiles(tmp_path_factory):
    return [profile.load(p) for p in PROFILES] + [
        profile.load(write(tmp_path_factory.mktemp("full"), FULL))]


@pytest.mark.parametrize("script", JOB_SCRIPTS, ids=lambda p: p.name)
def test_no_comment_says_what_a_profile_makes_false(script, tmp_path_factory):
    for centre in comment_profiles(tmp_path_factory):
        text = profile.render_file(script, centre)
        assert not contradictions(text, centre), (centre.path.name, contradictions(text, centre))


def test_the_comment_check_finds_what_a_profile_would_make_false():
    """The old comments, under the AMD profile: each kind of contradiction is found."""
    amd = profile.load(ROOT / "profiles" / "amd.toml")
    text = profile.render(
        "#!/bin/bash\n# Train on 2 nodes with 4 GPUs each, 60 GB per GPU.\n"
        "# Put train.py and your virtual environment .venv in one folder.\n"
        "#>cluster gpus=node tasks=1\n#SBATCH --nodes=2\n#SBATCH --gpus-per-node=4\n"
        "#SBATCH --mem=8G\n#<cluster\n"
        "# Your cluster may need: #SBATCH --partition=... and #SBATCH --account=...\n"
        "#>environment\nsource .venv/bin/activate  # or module load python/3.11\n"
        "#<environment\n# or --partition=gpu\n", amd)
    assert contradictions(text, amd) == [
        "4 GPU", "60GB of memory", "a hint to add --partition, which the script has",
        "a hint to add --account, which the script has", "partition gpu",
        "a .venv the script does not activate"]


# --- The container ------------------------------------------------------------------------

CONTAINED = GOOD.replace("setup = []", 'setup = []\ncontainer_image = "/images/pytorch.sif"\n'
                         'container_exec = "apptainer exec --bind /scratch"')
#: A word that names a program that runs PyTorch, and what may come before it on a line
#: without being a command: echo's text, `command -v`, a comment.
PROGRAM = re.compile(r"(?<![\w./-])(python3?|torchrun|accelerate|deepspeed)\b(?![.\w-])")
NOT_A_COMMAND = re.compile(r'^\s*echo |command -v $|#')


WRAP = "apptainer exec --bind /scratch $CONTAINER "


def programs(text: str) -> list[tuple[str, bool]]:
    """Each start of a program that runs PyTorch in a job script: (its line, whether the
    container command starts it)."""
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for m in PROGRAM.finditer(line):
            before = line[:m.start()]
            if not NOT_A_COMMAND.search(before):
                found.append((line, before.endswith(WRAP)))
    return found


@pytest.mark.parametrize("script", JOB_SCRIPTS, ids=lambda p: p.name)
def test_every_program_that_runs_pytorch_runs_in_the_container(script, tmp_path):
    """Each line of the rendered script that starts python, torchrun, accelerate or
    deepspeed starts it through the container command, once; the image is exported
    before the first of them."""
    text = profile.render_file(script, profile.load(write(tmp_path, CONTAINED)))
    started = programs(text)
    assert all(inside for _, inside in started), [line for line, inside in started if not inside]
    assert text.count(WRAP) == len(started)
    if started:
        assert text.index("export CONTAINER=/images/pytorch.sif ") < text.index(WRAP)


def test_the_container_check_finds_a_program_started_outside_it():
    text = profile.render_file(SNIPPETS / "ddp" / "mpirun.sbatch",
                               profile.load(ROOT / "profiles" / "default.toml"))
    assert programs(text) == [("    -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS "
                               "python train.py --batch-size 16", False)]


# --- Real centres ----------------------------------------------------------------------------

#: For four centres, the lines of a job script their documentation shows, and the line of
#: the rendered quick start that does the same (tests/harness/centres/*.toml).
CENTRES = sorted((ROOT / "tests" / "harness" / "centres").glob("*.toml"))


def missing_lines(fixture: Path, centre: profile.Profile) -> list[str]:
    """The documented lines whose counterpart the rendered script lacks: the fixture's
    script for the first partition, then each of its ``[[checks]]`` for the partition it
    names (a profile without that partition renders for its first)."""
    wanted = tomllib.loads(fixture.read_text())
    missing = []
    for check in [wanted, *wanted.get("checks", [])]:
        part = check.get("partition")
        part = part if part in {centre.label(p) for p in centre.partitions} else None
        text = profile.render_file(SNIPPETS / check["script"], centre, part)
        missing += [documented for documented, line in check["lines"]
                    if not re.search(rf"(?m)^{line}$", text)]
    return missing


@pytest.mark.parametrize("fixture", CENTRES, ids=lambda p: p.stem)
def test_a_centres_profile_renders_the_lines_its_documentation_shows(fixture):
    """Its quick start has each request, module and launch line of the centre's own
    example; the default profile's lacks some, so the comparison can fail."""
    assert not missing_lines(fixture, profile.load(ROOT / "profiles" / f"{fixture.stem}.toml"))
    assert missing_lines(fixture, profile.load(ROOT / "profiles" / "default.toml"))


def test_four_real_centres_have_a_profile_and_their_documented_lines():
    assert [p.stem for p in CENTRES] == ["alvis", "lumi-g", "snellius", "zih-alpha"]
