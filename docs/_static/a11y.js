/* Accessibility fixes for the book theme, applied as soon as the page is parsed. */
document.addEventListener("DOMContentLoaded", () => {
  // The search button shows "Search Ctrl+K" but was labelled "Search": screen reader
  // users who say what they see ("click Search Ctrl K") could not reach it. Without the
  // label, the button is named by the text it shows.
  for (const button of document.querySelectorAll(".search-button-field[aria-label]")) {
    button.removeAttribute("aria-label");
  }
  // The site's title and the search button sit above the navigation, outside every
  // landmark; make that part of the sidebar a landmark of its own.
  const top = document.querySelector(".sidebar-primary-items__start");
  if (top && !top.hasAttribute("role")) {
    top.setAttribute("role", "region");
    top.setAttribute("aria-label", "Site");
  }
  // The theme lets the keyboard focus a wide table's box, to scroll it sideways, from a
  // script that runs later: a focusable box needs a role and a name.
  const nameScrollingTables = () => {
    for (const box of document.querySelectorAll(".pst-scrollable-table-container")) {
      if (box.tabIndex === 0 && !box.hasAttribute("role")) {
        const caption = box.querySelector("caption");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", caption ? caption.textContent.trim() : "Table");
      }
    }
  };
  nameScrollingTables();
  new MutationObserver(nameScrollingTables).observe(document.body, {
    subtree: true, attributes: true, attributeFilter: ["tabindex"]});
});
