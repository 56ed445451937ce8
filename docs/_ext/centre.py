"""The centre profile on the pages: the "Your cluster" summary and the key reference.

``centre-summary`` shows the build's profile (the ``centre`` setting of conf.py, from
``make html CENTRE=...``) as readers need it: its partitions and their shape, how to ask
for them, where data goes, whom to ask. ``centre-keys`` documents every key a profile
may hold, from the checks in ``harness/profile.py``, so the reference cannot fall out of
step with what the checks accept. Where the profile names the release of PyTorch its
environment gives, the summary lists every script a page's note says that environment
cannot run as it is, with a link to the page (filled in once every page has been read).

A profile's ``[site]`` gives the built site the centre's look: its title, its logo above
the navigation, and links back to the centre's own pages in the header of every page
(``[site] links``, then ``docs_url`` and ``support_url``). The default profile has none of
them, so the guide's own build keeps its look.
"""

import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

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
        lines = ["| Partition | GPUs per node | CPUs per GPU | Memory per GPU | "
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
            f"`{p.label(p.partition)}` first." + (
                " Where a partition takes fewer nodes than a script asks for, its tab says "
                "so instead." if not all(map(_takes_every_job_script, p.partitions)) else ""))]
        rules = []
        if p.account_required:
            rules.append(f"Every job names the project that pays for it: "
                         f"`--account={p.account}` (use your own project's name).")
        rules += partition_rules(p)
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
                      "```bash", *p.setup, "```"]
        else:
            lines += ["The job scripts activate the virtual environment `.venv` of the "
                      "folder they are submitted from, with `source .venv/bin/activate` "
                      "before their first command ({doc}`environment` shows how to make "
                      "it)."]
        if p.torch:  # the scripts it cannot run: listed once every page has been read
            extra = f", with {_and(list(p.packages))}" if p.packages else ""
            lines += ["", f"This environment gives PyTorch {p.torch}{extra}.", "", SOFTWARE_LIST]
            env.centre_summary_docs = getattr(env, "centre_summary_docs", set()) | {env.docname}
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
        found = _markdown(self, lines)
        for i, node in enumerate(found):
            if node.astext() == SOFTWARE_LIST:
                found[i] = software_list(docname=env.docname)
        return found


#: Where the summary's list of scripts the environment cannot run goes.
SOFTWARE_LIST = "(the scripts the environment cannot run)"


class software_list(nodes.General, nodes.Element):
    """The place of that list, filled in once every page has been read."""


class SoftwareList(SphinxPostTransform):
    """Each script that a page's note says the centre's environment cannot run as it is
    (docs/_ext/snippets.py, harness/software.py), with a link to that page."""

    default_priority = 5  # before references are resolved (10): the links are references

    def run(self, **kwargs):
        for node in list(self.document.findall(software_list)):
            node.replace_self(software_items(self.env, node["docname"]))


def software_items(env, docname: str) -> list:
    found = {}
    for doc in sorted(getattr(env, "snippets_software", {})):
        for path, reasons in env.snippets_software[doc].items():
            found.setdefault(path, (doc, reasons))
    if not found:
        return [nodes.paragraph("", "It can run every script of this guide as it is.")]
    items = nodes.bullet_list()
    for path, (doc, reasons) in found.items():
        link = addnodes.pending_xref("", nodes.inline("", doc), refdomain="std",
                                     reftype="doc", reftarget=f"/{doc}", refexplicit=False,
                                     refdoc=docname, refwarn=True)
        items += nodes.list_item("", nodes.paragraph(
            "", "", nodes.literal("", Path(path).name), nodes.Text(" ("), link,
            nodes.Text(f"): {'; '.join(reasons)}")))
    return [nodes.paragraph("", f"It cannot run these {len(found)} scripts of the guide "
                                "as they are; a note under each, on its page, says what "
                                "to change:"), items]


def _outdated(app, env, added, changed, removed):
    """The page with the summary is read again when another page changes: its list of
    scripts comes from every page."""
    if not (added or changed or removed):
        return []
    return sorted(getattr(env, "centre_summary_docs", set()) - added - changed)


def _purge(app, env, docname):
    getattr(env, "centre_summary_docs", set()).discard(docname)


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


class CentreTested(Directive):
    """What the tests prove of the profile's own lines, for the page's how-tested box:
    its module lines, its container command, and the limits of a partition that the
    simulated cluster cannot hold it to. Nothing where the profile has none of them."""

    def run(self):
        env = self.state.document.settings.env
        p = centre.load(env.config.centre or None)
        env.note_dependency(str(p.path))
        said = []
        if p.modules:
            said.append("The set-up lines of the job scripts ran against modules of the "
                        "same names, generated for the tests: that proves the scripts' "
                        f"shape and order, not the modules of {p.name}.")
        if p.container_exec:
            said.append(f"`{p.container_exec.split()[0]}` was replaced by a stand-in that "
                        "notes what it was asked to run and runs it on the node without a "
                        "container: that proves every command goes through it, not that "
                        "the container works.")
        # a limit on nodes that the simulated cluster (harness/slurm.py) cannot hold
        loose = [p.label(part) for part in p.partitions if part.max_nodes and any(
            other.name == part.name and not 0 < other.max_nodes <= part.max_nodes
            for other in p.partitions)]
        if loose:
            said.append(f"The simulated cluster was not given the node limit of "
                        f"{_and([f'`{x}`' for x in loose])}: Slurm holds a partition to a "
                        "number of nodes, not one GPU type in it.")
        return _markdown(self, [" ".join(said)]) if said else []


def partition_rules(p: centre.Profile) -> list[str]:
    """The rules of the partitions as sentences: whole nodes, the memory a GPU job asks
    for and how, and the most nodes, CPUs and memory of a node one job may have. A rule
    every partition has is said once; the others once for each partition that has them."""
    own = {p.label(part): _rules_of(p, part) for part in p.partitions}
    common = [rule for rule in own[p.label(p.partition)]
              if all(rule in rules for rules in own.values())]
    found = [rule[0].upper() + rule[1:] + "." for rule in common]
    if len(own) == 1:
        return found
    for label, rules in own.items():
        rest = [rule for rule in rules if rule not in common]
        if rest:
            found.append(f"On `{label}`, {'; '.join(rest)}.")
    return found


def _takes_every_job_script(part: centre.Partition) -> bool:
    """Whether a job of as many nodes as any job script of the guide asks for may run on
    ``part``."""
    asked = [int(n) for script in (centre.ROOT / "snippets").rglob("*.sbatch")
             for n in re.findall(r"(?m)^#SBATCH --nodes=(\d+)", script.read_text())]
    return part.takes(max(asked, default=1))


def _rules_of(p: centre.Profile, part: centre.Partition) -> list[str]:
    rules = []
    if p.exclusive_on(part):
        rules.append("GPU jobs take whole nodes: the job scripts ask `--exclusive`")
    if p.ask_memory_on(part):
        option = ("`--mem-per-gpu`" if part.mem_option == "mem-per-gpu" else
                  f"`--mem` ({part.mem_for(part.gpus_per_node)} for a whole node)")
        rules.append(f"every GPU job asks for its memory, {part.mem_per_gpu} per GPU, with "
                     f"{option}")
    if part.max_nodes:  # a limit or the centre's advice: the words fit both
        rules.append(f"jobs use {part.most_nodes}")
    limits = []
    if part.max_cpus_per_job:
        limits.append(f"{part.max_cpus_per_job} of a node's {part.cpus_per_node} CPUs"
                      if part.cpus_per_node else f"{part.max_cpus_per_job} CPUs of a node")
    if part.mem_per_node:
        limits.append(f"{part.mem_per_node} of a node's memory")
    if limits:
        rules.append(f"a job may have at most {_and(limits)}")
    if part.refuses_whole_nodes:
        rules.append(f"the job scripts do not ask for whole nodes with `--exclusive`, "
                     f"which would take all {part.cpus_per_node} CPUs of a node")
    return rules


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


def header_links(p: centre.Profile) -> list[tuple[str, str]]:
    """``(text, url)`` of each link back to the centre's pages: ``[site] links`` in their
    order, then the centre's documentation and support where no link names them yet."""
    links = list(p.site_links)
    for text, url in ((f"{p.name} documentation", p.docs_url), ("Support", p.support_url)):
        if "@" in url and ":" not in url:
            url = f"mailto:{url}"  # a support address
        if url and url not in {u for _, u in links}:
            links.append((text, url))
    return links


def _site_look(app, config):
    """The title and logo of ``[site]``: the logo's file (next to the profile) is copied
    into the site, and the title stays beside it."""
    p = centre.load(getattr(config, "centre", "") or None)  # "centre": snippets.py
    if p.site_title:
        config.html_title = p.site_title
    if p.site_logo:
        config.html_logo = str((p.path.parent / p.site_logo).resolve())
        options = dict(config.html_theme_options)
        options["logo"] = {**options.get("logo", {}), "text": config.html_title}
        config.html_theme_options = options
    app.centre_header = (p.name, header_links(p))


def _add_header_links(app, pagename, templatename, context, doctree):
    """The links in the book theme's page header, before its own buttons (the theme fills
    ``header_buttons`` at priority 501): each a button with its text on a wide screen,
    and together in one menu on a narrow one, where the text would not fit."""
    name, links = getattr(app, "centre_header", ("", []))
    if not links or "header_buttons" not in context:
        return
    buttons = [{"type": "link", "url": url, "text": text, "tooltip": text}
               for text, url in links]
    menu = {"type": "group", "buttons": buttons, "tooltip": f"Pages of {name}",
            "icon": "fa-solid fa-arrow-up-right-from-square", "label": "centre-links",
            "classes": "d-md-none"}
    wide = [b | {"label": "centre-link", "classes": "d-none d-md-inline-flex"}
            for b in buttons]
    context["header_buttons"][:0] = [*wide, menu]


def setup(app):
    app.add_directive("centre-summary", CentreSummary)
    app.add_directive("centre-keys", CentreKeys)
    app.add_directive("centre-tested", CentreTested)
    app.add_node(software_list)
    app.add_post_transform(SoftwareList)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("config-inited", _site_look)
    app.connect("html-page-context", _add_header_links, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
