"""What each page costs a reader on a first visit (tools/page_weight.py prints the same
table for any built site)."""

import pytest

from tools.page_weight import table

pytestmark = pytest.mark.browser

#: Bytes a page may load on a first visit, everything included, as sent without compression
#: (the theme's own stylesheets and scripts are about 0.9 MB of it). A recipe shows complete
#: scripts of about 300 lines each, with their diff: 1.13 MB for the two heaviest.
BUDGET = 1200 * 1024


@pytest.fixture(scope="module")
def weights(every_page):
    print("\n" + table(every_page.weights))
    return every_page.weights


def test_every_page_stays_within_its_budget(weights):
    heavy = [f"{w.page}: {w.total / 1024:.0f} kB" for w in weights if w.total > BUDGET]
    assert not heavy, heavy


def test_only_what_is_used_is_loaded(weights):
    loaded = {url.split("?")[0] for w in weights for url in w.urls}
    # the theme's 1.5 MB icon script is replaced by an empty file: icons come from the font
    assert "_static/scripts/fontawesome.js" in loaded
    fonts = {url for url in loaded if url.endswith(".woff2")}
    assert fonts == {"_static/vendor/fontawesome/webfonts/fa-solid-900.woff2"}, fonts


def test_the_icon_script_is_the_empty_replacement(site):
    assert (site / "_static/scripts/fontawesome.js").stat().st_size < 1024
