// Fills the health table: one request per check, so a slow check (a cold Spark start) does not
// hold up the others. Refreshes every 15 s while the tab is visible, and says how old the data is.
(function () {
  "use strict";
  const table = document.getElementById("health");
  if (!table) return;
  const updated = document.getElementById("health-updated");
  const REFRESH_MS = 15000;
  let lastDone = null;
  let timer = null;

  function render(row, result) {
    row.dataset.state = result.ok ? "up" : "down";
    const badge = row.querySelector(".state .badge");
    badge.className = "badge " + (result.ok ? "up" : "down");
    badge.textContent = result.ok ? "up" : "down";
    // Anonymous answers carry up/down only: no latency, no detail beyond the state.
    const latency = typeof result.latency_ms === "number" ? result.latency_ms.toFixed(1) + " ms" : "–";
    row.querySelector(".latency").textContent = latency;
    row.querySelector(".detail").textContent = result.detail;
  }

  async function checkOne(row) {
    const name = row.dataset.check;
    try {
      const resp = await fetch(table.dataset.url + "?format=json&check=" + encodeURIComponent(name),
                               {headers: {Accept: "application/json"}, cache: "no-store"});
      const body = await resp.json();
      render(row, body.checks[name]);
    } catch (err) {
      render(row, {ok: false, latency_ms: 0, detail: "console unreachable: " + err});
    }
  }

  async function refresh() {
    const rows = Array.from(table.querySelectorAll("tr[data-check]"));
    await Promise.all(rows.map(checkOne));
    lastDone = Date.now();
    showAge();
  }

  function showAge() {
    if (lastDone === null) return;
    updated.textContent = "updated " + Math.round((Date.now() - lastDone) / 1000) + " s ago";
  }

  function schedule() {
    clearInterval(timer);
    if (document.hidden) return;  // no polling in hidden tabs
    timer = setInterval(refresh, REFRESH_MS);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) refresh();
    schedule();
  });
  setInterval(showAge, 1000);
  refresh();
  schedule();
})();
