// Progressive: every choice is a link to a static setup page, so the page works without this script. With it,
// the landing page swaps in the chosen setup's selector in place (keeping the package and installer choices),
// and each command gets a copy button.
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
  const swap = async (link) => {
    const url = link.href;
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    const next = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("selector");
    for (const element of next.querySelectorAll("[href]")) {
      element.setAttribute("href", new URL(element.getAttribute("href"), url).href);
    }
    const old = document.getElementById("selector");
    const checked = [...old.querySelectorAll("input:checked")].map((input) => input.id);
    const axis = link.closest(".axis").getAttribute("aria-labelledby");
    next.dataset.swap = "";
    old.replaceWith(next);
    for (const id of checked) { const input = document.getElementById(id); if (input) input.checked = true; }
    wire(next);
    const current = next.querySelector(`[aria-labelledby="${axis}"] [aria-current]`);
    if (current) current.focus();
  };
  document.addEventListener("click", (event) => {
    const link = event.target.closest("#selector[data-swap] .axis a[href]");
    if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    swap(link).catch(() => { window.location.href = link.href; });
  });
  wire(document);
})();
