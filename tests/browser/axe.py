"""axe-core, run over pages open in the browser, in light and in dark mode.

axe-core is the copy that the PyPI package axe-playwright-python ships (no download at
test time). The rules are those of WCAG 2.0-2.2 A and AA, best practices and the
experimental ones. Checking every page in both modes in full would take minutes, so the
checks that give the same answer on every page are not repeated: colour contrast depends
only on the colours, size and weight of text, so it runs where a page shows a text style
(in that mode) that no earlier page showed; dark mode changes only colours, so only the
colour rules run there; and in code blocks one token per style stands for all the others.
"""

from __future__ import annotations

import importlib.resources

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice", "experimental"]

#: Keep, in each code block, one highlighted token for each combination of colour, weight
#: and background it has in light or dark mode, and turn the others into plain text: a
#: token's contrast depends on nothing else, and axe then visits hundreds of elements
#: instead of thousands.
ONE_TOKEN_PER_STYLE = """() => {
  const html = document.documentElement, original = html.dataset.theme;
  const tokens = [...document.querySelectorAll('div.highlight pre span:not(.hll)')]
      .filter(span => span.children.length === 0);
  const keep = new Set();
  for (const mode of ['light', 'dark']) {
    html.dataset.theme = mode;
    const seen = new Set();
    for (const span of tokens) {
      const style = getComputedStyle(span);
      const line = span.closest('.hll') || span.closest('pre');
      const key = [style.color, style.fontWeight, style.backgroundColor,
                   getComputedStyle(line).backgroundColor].join('|');
      if (!seen.has(key)) { seen.add(key); keep.add(span); }
    }
  }
  html.dataset.theme = original;
  for (const span of tokens) if (!keep.has(span)) span.replaceWith(...span.childNodes);
}"""

START_AXE = """(options) => {
  window.axeResult = null;
  axe.run(document, options).then(result => {
    window.axeResult = result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary)}));
  });
}"""

#: The text styles of a page: colour, background (the first opaque one behind the text),
#: size and weight of every element that holds text. Colour contrast depends on nothing
#: else, so a page whose styles have all been checked on earlier pages needs no new check.
TEXT_STYLES = """() => {
  const background = element => {
    for (let e = element; e; e = e.parentElement) {
      const colour = getComputedStyle(e).backgroundColor;
      if (colour !== 'rgba(0, 0, 0, 0)' && colour !== 'transparent') return colour;
    }
    return 'page';
  };
  const styles = new Set();
  for (const e of document.body.querySelectorAll('*')) {
    if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const style = getComputedStyle(e);
    styles.add([style.color, background(e), style.fontSize, style.fontWeight].join('|'));
  }
  return [...styles];
}"""

#: Every rule, except two that are covered elsewhere: the colour rules run wherever a page
#: has a text style not checked before, and "region" (is all content inside landmarks?),
#: which visits every element but depends only on the layout around the article, runs on
#: the pages below, which also get every rule in both modes.
EVERY_RULE_ON = {"index.html", "search.html", "basics/dataparallel.html"}
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
EVERYTHING = {"runOnly": {"type": "tag", "values": TAGS}, "resultTypes": ["violations"]}
WORKERS = 2  # pages checked at the same time, one per core


def source() -> str:
    return (importlib.resources.files("axe_playwright_python") / "axe.min.js").read_text()


def axe_options(name, mode, new_styles):
    """What axe runs on a page in a mode; None for nothing."""
    if name in EVERY_RULE_ON:
        return EVERYTHING
    rules = {"region": {"enabled": False}}
    if not new_styles:
        rules.update({rule: {"enabled": False} for rule in COLOUR_RULES})
    if mode == "light":
        return {**EVERYTHING, "rules": rules}
    # dark mode changes only colours
    return {"runOnly": {"type": "rule", "values": COLOUR_RULES},
            "resultTypes": ["violations"]} if new_styles else None


def check_batch(tabs, names, mode, checked_styles):
    """Run axe on the open pages at the same time; return {name: violations}."""
    started = []
    for tab, name in zip(tabs, names):
        tab.evaluate(f"document.documentElement.dataset.theme = '{mode}'")
        styles = set(tab.evaluate(TEXT_STYLES))
        options = axe_options(name, mode, styles - checked_styles)
        checked_styles |= styles
        if options is not None:
            tab.evaluate(START_AXE, options)
            started.append((tab, name))
    results = dict.fromkeys(names, [])
    for tab, name in started:
        tab.wait_for_function("window.axeResult !== null", timeout=120_000)
        results[name] = tab.evaluate("window.axeResult")
    return results
