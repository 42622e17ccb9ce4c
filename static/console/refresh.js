// Auto-refresh for every console page: re-fetches the page and swaps each region marked
// `data-live` (matched by id) for its fresh copy. A region with `data-live-every="N"` is refreshed
// at most every N seconds; the regions wanted are named in the `X-Console-Regions` header, so the
// server can skip costly parts (the charts). No refresh while the tab is hidden, a dialog is open,
// the user paused it, or a control inside a region has focus. Shows "updated N s ago".
(function () {
  "use strict";
  const body = document.body;
  const status = document.getElementById("refresh-status");
  const toggle = document.getElementById("refresh-toggle");
  const everyMs = Math.max(2, Number(body.dataset.refreshSeconds || 5)) * 1000;
  const lastSwap = {};
  let lastOk = Date.now();
  let inFlight = false;
  let paused = false;
  let failure = "";

  function regions() {
    return Array.from(document.querySelectorAll("[data-live][id]"));
  }

  function dueRegions(now) {
    return regions().filter(function (el) {
      const every = Number(el.dataset.liveEvery || 0) * 1000;
      return !every || now - (lastSwap[el.id] || 0) >= every;
    });
  }

  function blocked() {
    if (paused || document.visibilityState === "hidden") return true;
    if (document.querySelector("dialog[open]")) return true;
    const active = document.activeElement;
    return Boolean(active && active.closest("[data-live]") && active.matches("input, select, textarea"));
  }

  function show() {
    if (!status) return;
    const age = Math.round((Date.now() - lastOk) / 1000);
    let text = "updated " + age + " s ago";
    if (paused) text += " · refresh paused";
    else if (document.querySelector("dialog[open]")) text += " · refresh waits for the dialog";
    if (failure) text += " · " + failure;
    status.textContent = text;
    status.dataset.ageS = String(age);
    status.dataset.state = failure ? "error" : paused ? "paused" : "on";
  }

  async function refresh() {
    if (inFlight || blocked()) return;
    const now = Date.now();
    const due = dueRegions(now);
    if (!due.length) return;
    inFlight = true;
    try {
      const resp = await fetch(window.location.href, {
        headers: {"X-Console-Refresh": "1", "X-Console-Regions": due.map((el) => el.id).join(",")},
        credentials: "same-origin",
        cache: "no-store",
      });
      if (resp.redirected && new URL(resp.url).pathname.startsWith("/login")) {
        failure = "signed out: reload the page";
        paused = true;
        return;
      }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      if (blocked()) return;  // a dialog opened meanwhile: keep what the user looks at
      due.forEach(function (el) {
        const fresh = doc.getElementById(el.id);
        if (!fresh) return;
        const current = document.getElementById(el.id);
        if (current) current.replaceWith(document.importNode(fresh, true));
        lastSwap[el.id] = now;
      });
      lastOk = Date.now();
      failure = "";
      document.dispatchEvent(new CustomEvent("console:refreshed", {detail: {regions: due.map((el) => el.id)}}));
    } catch (err) {
      failure = "refresh failed (" + err.message + "), retrying";
    } finally {
      inFlight = false;
      show();
    }
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      if (!paused) failure = "";
      toggle.setAttribute("aria-pressed", String(paused));
      toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
      show();
      if (!paused) refresh();
    });
  }
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") refresh();
  });
  const start = Date.now();
  regions().forEach(function (el) { lastSwap[el.id] = start; });
  let lastTick = start;
  setInterval(function () {
    show();
    if (Date.now() - lastTick >= everyMs) {
      lastTick = Date.now();
      refresh();
    }
  }, 1000);
  show();
})();
