"""Sphinx configuration for the guide."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))
sys.path.insert(0, str(Path(__file__).parent.parent))  # harness/profile.py: centre profiles
sys.path.insert(0, str(Path(__file__).parent / "_diagrams"))  # diagrams drawn at build time

project = "Distributed PyTorch on HPC clusters"
author = "The guide's authors"
copyright = "2026, the guide's authors"
language = "en"

extensions = [
    "myst_parser",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinx_togglebutton",
    "sphinx_exercise",
    "sphinx.ext.extlinks",
    "lesson",
    "snippets",
    "centre",
    "diagrams",
    "speedups",  # the sidebar, the search index and the garbage collector, made cheaper
]

# The centre profile the site is built for (make html CENTRE=profiles/h100.toml): job
# scripts and the cluster facts pages name follow it (harness/profile.py).
from harness import profile as _profile  # noqa: E402

centre = os.environ.get(_profile.ENV_VAR, "")
try:
    _centre = _profile.load(centre or None)
except _profile.ProfileError as _error:
    sys.stderr.write(f"{_error}\n")
    raise SystemExit(1) from None
centre = str(_centre.path.resolve()) if centre else ""
myst_substitutions = {
    "cluster_name": _centre.name,
    "login_host": _centre.login_host,
    "partition": _centre.partition.name,
    "gpus_per_node": _centre.gpus_per_node,
    "gpus_two_nodes": 2 * _centre.gpus_per_node,
    "last_rank_two_nodes": 2 * _centre.gpus_per_node - 1,
    "last_local_rank": _centre.gpus_per_node - 1,
    "gpu_request": _centre.partition.gpu_request(),
    "cpus_per_gpu": _centre.partition.cpus_per_gpu,
    "account": _centre.account,
    "scratch": _centre.scratch,
    "module_line": "; ".join(_centre.setup) or "source .venv/bin/activate",
    # What a reader does with a job script before submitting it: on the example cluster,
    # adapt it; on a centre's, at most put in their own project (the profile wrote the rest).
    "job_software": (
        f"The job loads the modules of {_centre.name} and runs PyTorch in its container "
        "({doc}`slurm/your_cluster`)." if _centre.container_exec else
        f"The job sets up PyTorch with the module lines of {_centre.name} "
        "({doc}`slurm/environment` explains them)." if _centre.setup
        else "The job activates a virtual environment `.venv` in that folder, with PyTorch "
             "installed ({doc}`how to make one <slurm/environment>`)."),
    "job_adapt": (
        "Add the {term}`partition` and account your cluster needs, and change "
        "`--gpus-per-node` and `--cpus-per-task` to your nodes." if _centre.is_default else
        f"The {{term}}`partition`, GPUs and cores are those of {_centre.name} "
        f"({{doc}}`slurm/your_cluster`)."
        + (f" Replace the account, `{_centre.account}`, with your project's."
           if _centre.account_required else "")),
}
# The hardware page's script asks for the partition's GPU type and last feature, where
# it has them (harness/profile.py); its sentences about them follow.
_part, _gpus = _centre.partition, _centre.gpus_per_node
_type, _feature = _part.gpu_type, (_part.features or ("",))[-1]
_ask = _centre.ask_gpus  # --gpus-per-node=4 or --gres=gpu:4, as the cluster asks


def _spellings(request: str) -> str:
    """The other way to write a GPU request, and which one this cluster's scripts use."""
    if _centre.gpu_option == "gres":
        return (f"`--gpus-per-node={request}` is the newer spelling of the same request. "
                f"The job scripts for {_centre.name} use `--gres`, as its documentation does")
    return f"`--gres=gpu:{request}` is the older spelling of the same request"


myst_substitutions |= {
    "hw_mem": (
        f"`--mem-per-gpu={_part.mem_per_gpu}` asks for {_part.mem_per_gpu} of the node's "
        f"memory (host memory, not GPU memory) for each GPU: {_part.mem_for(_gpus)} for "
        f"{_gpus} GPUs."),
    "hw_type": (
        f"`{_ask(f'{_type}:{_gpus}')}` asks for {_gpus} GPUs of type `{_type}` on each "
        f"node; {_spellings(f'{_type}:{_gpus}')}. "
        + (f"On {_centre.name} every job names the type, as the other jobs of this chapter "
           f"do." if _part.ask_type else
           f"Without a type, `{_ask(str(_gpus))}` takes {_gpus} GPUs of any type, as "
           f"the other jobs of this chapter do.") if _type else
        f"`{_ask(str(_gpus))}` asks for {_gpus} GPUs on each node: the GPUs of "
        f"{_centre.name} have no type to name. Where a cluster has several kinds, "
        f"`{_ask(f'TYPE:{_gpus}')}` asks for one; {_spellings(f'TYPE:{_gpus}')}."),
    "hw_feature": (
        f"`--constraint={_feature}` keeps the job to nodes with the feature `{_feature}`."
        if _feature else
        f"The nodes of {_centre.name} have no features to ask for, so the script has no "
        f"`--constraint` line. Where nodes have them, `--constraint=NAME` keeps the job to "
        f"nodes with the feature `NAME`."),
}

try:  # the spell checker needs the enchant C library (Debian: libenchant-2-2)
    import enchant  # noqa: F401
except ImportError:
    pass
else:
    extensions.append("sphinxcontrib.spelling")
    spelling_lang = "en_GB"
    # One word list for the whole site, plus one per chapter (docs/<chapter>/wordlist*.txt).
    spelling_word_list_filename = ["wordlist.txt", *sorted(
        str(p.relative_to(Path(__file__).parent)) for p in Path(__file__).parent.glob("*/wordlist*.txt"))]
    spelling_show_suggestions = False
    spelling_warning = True
    spelling_ignore_pypi_package_names = False
    spelling_ignore_contributor_names = False

nitpicky = True
exclude_patterns = ["_build", "_data", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist", "attrs_inline", "substitution"]
myst_heading_anchors = 3

# API links work offline: they are plain links with a fixed pattern.
extlinks = {
    "torchapi": ("https://docs.pytorch.org/docs/stable/generated/%s.html", "%s"),
    "pytorch": ("https://docs.pytorch.org/docs/stable/%s", "%s"),
}
extlinks_detect_hardcoded_links = True

copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True  # an output's copy button copies its command
copybutton_line_continuation_character = "\\"

html_theme = "sphinx_book_theme"
# A centre's profile may give the site its own look ([site]): the centre extension
# (docs/_ext/centre.py) then replaces this title, adds its logo, and puts links back to
# the centre's pages in each page's header. The default profile keeps the guide's own.
html_title = "Distributed PyTorch on HPC clusters"
html_static_path = ["_static"]
html_css_files = ["lesson.css", "site.css"]
html_js_files = ["a11y.js"]
html_theme_options = {
    "navbar_persistent": [],
    "show_toc_level": 2,
    "use_download_button": False,
    "home_page_in_toc": True,
    # The theme loads Sphinx's search index on every page: use it to show results as the
    # reader types in the search box.
    "search_as_you_type": True,
}
html_last_updated_fmt = None

linkcheck_ignore = [r"https?://.*"]  # the build machine is offline: check internal links only
