"""The centre profile on the pages: the "Your cluster" summary and the key reference.

``centre-summary`` shows the build's profile (the ``centre`` setting of conf.py, from
``make html CENTRE=...``) as readers need it: its partitions and their shape, how to ask
for them, where data goes, whom to ask. ``centre-keys`` documents every key a profile
may hold, from the checks in ``harness/profile.py``, so the reference cannot fall out of
step with what the checks accept.
"""

import sys
from pathlib import Path

from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness import profile as centre  # noqa: E402

_TYPES = {str: "string", int: "integer", bool: "true/false", list: "list of strings",
          dict: "table of strings"}


def _markdown(directive, lines):
    """The lines parsed as the page's Markdown; marked as generated from the profile, so
    that they do not count towards the page's reading budget (reading.py)."""
    directive.state.nested_parse(StringList(lines, "centre"), directive.content_offset,
                                 node := __import__("docutils").nodes.container())
    for child in node.children:
        child["not_prose"] = True
    return node.children


class CentreSummary(Directive):
    def run(self):
        env = self.state.document.settings.env
        p = centre.load(env.config.centre or None)
        env.note_dependency(str(p.path))
        vendor = "AMD (ROCm)" if p.gpu_vendor == "amd" else "NVIDIA (CUDA)"
        lines = ["| Partition | GPUs per node | CPU cores per GPU | Memory per GPU | "
                 "Ask with | What for |", "| --- | --- | --- | --- | --- | --- |"]
        for part in p.partitions:
            ask = f"`{p.ask_gpus(part.gpu_request())}`"
            if not part.default:
                ask = f"`--partition={part.name}` {ask}"
            lines.append(f"| `{p.label(part)}`{' (default)' if part.default else ''} | "
                         f"{part.gpus_per_node} | {part.cpus_per_gpu} | {part.mem_per_gpu} | "
                         f"{ask} | {part.description} |")
        lines += ["", f"The GPUs are {vendor}. " + (
            f"The job scripts of this guide use the `{p.partition.name}` partition."
            if len(p.partitions) == 1 else
            f"Each job script of this guide is shown for every partition, one tab each, "
            f"`{p.label(p.partition)}` first.")]
        rules = []
        if p.account_required:
            rules.append(f"Every job names the project that pays for it: "
                         f"`--account={p.account}` (use your own project's name).")
        if p.exclusive:
            rules.append("GPU jobs take whole nodes: the job scripts ask `--exclusive`.")
        if p.ask_memory:
            rules.append(f"Every GPU job asks for its memory, {p.partition.mem_per_gpu} per "
                         f"GPU on `{p.partition.name}`, with `--mem`.")
        rules += list(p.notes)
        if rules:
            lines += [""] + [f"- {rule}" for rule in rules]
        if not p.is_default:
            lines += ["", "The job scripts on these pages are written for this cluster. The "
                      "outputs they show come from runs on the guide's own example cluster, "
                      f"with {centre.load(centre.DEFAULT).gpus_per_node} GPUs per node: "
                      "where the numbers of processes differ, yours will too."]
        lines += ["", "## Software", ""]
        if p.setup:
            lines += ["Job scripts set up their software with these lines:", "",
                      "```bash", *p.setup, "```", "",
                      "The tests of this guide run these lines against modules of the "
                      "same names that they generate themselves: that proves the "
                      "scripts' shape and order, not the centre's own modules."]
        else:
            lines += ["Job scripts run in the virtual environment they were submitted "
                      "from, or activate it themselves ({doc}`environment`)."]
        if p.nccl_socket_ifname:
            lines += ["", f"Between nodes, NCCL{' (RCCL)' if p.gpu_vendor == 'amd' else ''}"
                      f" must use the network interfaces `{p.nccl_socket_ifname}`: the job "
                      f"scripts export `NCCL_SOCKET_IFNAME`."]
        if p.container_exec:
            lines += ["", f"PyTorch runs inside the container image `{p.container_image}`. "
                      f"Each `python`, `torchrun`, `accelerate` and `deepspeed` command of the "
                      f"job scripts starts through `{p.container_exec}`, with the image "
                      f"exported as `CONTAINER`."]
        if p.variables:
            lines += ["", "Every job script exports these variables after those lines:", "",
                      "```bash", *(f"export {k}={v}" for k, v in p.variables), "```"]
        if p.partition.cpu_bind:
            lines += ["", "A job script that starts one task per GPU binds each task to the "
                      "CPU cores closest to its GPU: it exports `SLURM_CPU_BIND`, which "
                      "`srun` reads as `--cpu-bind`. A script that starts one `torchrun` "
                      "per node has one task for all the node's GPUs, so it binds nothing: "
                      "its processes share the cores of that task ({doc}`../ddp/topology` "
                      "shows how `torchrun` can bind each process itself)."]
        lines += ["", "## Where things go", "",
                  f"- Log in to `{p.login_host}`.",
                  f"- Large temporary data: `{p.scratch}`."]
        if p.project:
            lines.append(f"- Data shared by your project: `{p.project}`.")
        links = [(p.accounts_url, "Getting a project and an account"),
                 (p.support_url, "Support"), (p.docs_url, "The centre's documentation")]
        links = [f"- [{text}]({url})" for url, text in links if url]
        if links:
            lines += ["", "## Whom to ask", "", *links]
        return _markdown(self, lines)


class CentreKeys(Directive):
    def run(self):
        self.state.document.settings.env.note_dependency(centre.__file__)
        lines = []
        for table, keys in centre.TABLES:
            lines += [f"### `{table}`", "", "| Key | Type | Default | Meaning |",
                      "| --- | --- | --- | --- |"]
            for key, (kind, required, default, meaning) in keys.items():
                shown = "required" if required else f"`{centre.as_toml(default)}`"
                lines.append(f"| `{key}` | {_TYPES[kind]} | {shown} | "
                             f"{meaning.replace('|', '/')} |")
            lines.append("")
        return _markdown(self, lines)


def setup(app):
    app.add_directive("centre-summary", CentreSummary)
    app.add_directive("centre-keys", CentreKeys)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
