// Progressive: every choice is a link to a static setup page, so the page works without this script. With it,
// the landing page swaps in the chosen setup's selector in place (keeping the package and installer choices) and
// names it in the URL's fragment (index.html#pt214cu130-cp311 opens on it), and each command gets a copy button.
(() => {
  "use strict";
  const wire = (root) => {
    for (const button of root.querySelectorAll(".copy")) {
      button.hidden = false;
      button.addEventListener("click", async () => {
        const text = button.previousElementSibling.textContent;
        try { await navigator.clipboard.writeText(text); button.textContent = "Copied"; }
        catch { button.textContent = "Select and copy"; }
        setTimeout(() => { button.textContent = "Copy"; }, 2000);
      });
    }
  };
  const swap = async (url, axis) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    const next = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("selector");
    for (const element of next.querySelectorAll("[href]")) {
      element.setAttribute("href", new URL(element.getAttribute("href"), url).href);
    }
    const old = document.getElementById("selector");
    const checked = [...old.querySelectorAll("input:checked")].map((input) => input.id);
    next.dataset.swap = "";
    old.replaceWith(next);
    for (const id of checked) { const input = document.getElementById(id); if (input) input.checked = true; }
    wire(next);
    history.replaceState(null, "", `#${next.dataset.setup}`);  // a link to this choice, also with the script
    const current = axis && next.querySelector(`[aria-labelledby="${axis}"] [aria-current]`);
    if (current) current.focus();
  };
  document.addEventListener("click", (event) => {
    const link = event.target.closest("#selector[data-swap] .axis a[href]");
    if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    swap(link.href, link.closest(".axis").getAttribute("aria-labelledby")).catch(() => {
      window.location.href = link.href;
    });
  });
  const follow = () => {  // index.html#pt214cu130-cp311: open on that setup
    const selector = document.getElementById("selector");
    const wanted = window.location.hash.slice(1);
    if (selector && "swap" in selector.dataset && /^pt[0-9]+[a-z0-9]+-cp[0-9]+$/.test(wanted)
        && wanted !== selector.dataset.setup) {
      swap(new URL(`select/${wanted}.html`, window.location.href).href).catch(() => {});
    }
  };
  window.addEventListener("hashchange", follow);
  follow();
  wire(document);
})();
