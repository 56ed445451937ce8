"""Costs of Sphinx that grow with the site, cut without changing a byte of output
(measured with ``make bench``, which says where a build's time goes).

- The sidebar: the theme puts the whole site's table of contents, titles only, in every
  page. Sphinx builds it by copying every page's full table of contents (all its
  headings) for every page, then dropping all but the titles: time that grows with the
  square of the number of pages. Here each page's table of contents is cut to its title
  once, after reading, and the sidebar is built from those.
- The search index: Sphinx stems each page's words afresh for every page; here each word
  is stemmed once per build.
- Python's cycle collector: every node of a doctree points to its parent, so only the
  collector frees a doctree, and each of its runs scans the build's whole heap (a clean
  build spent an eighth of its time there). Here it does not run: the process ends
  soon (a clean build of 68 pages peaks at about 260 MB instead of 140 MB).
- The theme's templates: compiled once and kept with the doctrees, not compiled again by
  every build (a rebuild with nothing to do spent a sixth of its time on them).
"""

import functools
import gc
from pathlib import Path

from jinja2 import FileSystemBytecodeCache
from sphinx import addnodes
from sphinx.search.en import SearchEnglish

_titles: dict = {}  # docname -> its table of contents as titles_only leaves it


def _cut(toc):
    """The toc as ``titles_only`` leaves it: its title(s) and any toctrees under them."""
    toc = toc.deepcopy()
    if any(isinstance(top, addnodes.only) for top in toc.children):
        return toc  # Sphinx cuts what the builder's tags leave of it: leave it to Sphinx
    for top in toc.children:
        if len(top) > 1:
            if subtrees := list(top.findall(addnodes.toctree)):
                top[1][:] = subtrees
            else:
                top.pop(1)
    return toc


def cut_tocs(app, env):
    _titles.clear()
    _titles.update((doc, _cut(toc)) for doc, toc in env.tocs.items())
    return []


def titles_only_toctree(app, pagename, templatename, context, doctree):
    """Give the page's templates a ``toctree()`` that, asked for titles only, reads the
    cut tables of contents."""
    whole = context.get("toctree")
    if whole is None:
        return

    def toctree(**kwargs):
        if not kwargs.get("titles_only") or not _titles:
            return whole(**kwargs)
        env = app.env
        tocs, env.tocs = env.tocs, _titles
        try:
            return whole(**kwargs)
        finally:
            env.tocs = tocs

    context["toctree"] = toctree


class English(SearchEnglish):
    """English for the search index, each word stemmed once per build."""

    def __init__(self, options):
        super().__init__(options)
        self.stem = functools.cache(self.stem)


def keep_compiled_templates(app):
    environment = getattr(getattr(app.builder, "templates", None), "environment", None)
    if environment is not None:
        folder = Path(app.doctreedir) / "templates"
        folder.mkdir(parents=True, exist_ok=True)
        environment.bytecode_cache = FileSystemBytecodeCache(str(folder))


def skip_collection_at_exit(app, exception):
    """The build's objects are left out of later collections (the exit's among them), and
    the collector runs again for whatever runs after the build in this process (a test
    that builds a site, sphinx-autobuild)."""
    gc.freeze()
    gc.enable()


def setup(app):
    app.connect("env-updated", cut_tocs)
    app.connect("html-page-context", titles_only_toctree)
    app.add_search_language(English)
    app.connect("builder-inited", keep_compiled_templates)
    app.connect("build-finished", skip_collection_at_exit)
    gc.disable()  # from setup: before Sphinx loads a saved environment
    return {"parallel_read_safe": True, "parallel_write_safe": True}
