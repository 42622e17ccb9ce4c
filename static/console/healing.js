// The table page's "Run healer now" result. After the operator's POST the page is
// /ui/tables/<t>/?healing_run=<id> and shows #healing-run; while it says "running", this polls
// GET /api/v1/healing/runs/<id> (404 until the run is recorded) every 2 s (slower after a
// minute), counting the elapsed time on the server's clock. Once the run is recorded, the panel
// and the healing history are fetched again from the page, so the result reads exactly as the
// server renders it (actions, waiting notes, errors).
(function () {
  "use strict";
  const panel = document.getElementById("healing-run");
  if (!panel || panel.dataset.state !== "running") return;
  const status = document.getElementById("healing-run-status");
  const loaded = Date.now();
  const serverNow = Number(panel.dataset.nowMs || 0) || loaded;
  const requested = Number(panel.dataset.requestedMs || 0) || serverNow;
  const SLOW_AFTER_MS = 60000;

  function elapsedText(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    return m + " min " + String(s % 60).padStart(2, "0") + " s";
  }

  function elapsed() {
    return serverNow + (Date.now() - loaded) - requested;
  }

  function showRunning(note) {
    const ms = elapsed();
    let text = "still running for " + elapsedText(ms);
    if (ms > SLOW_AFTER_MS * 2) text += " (is a Celery worker running?)";
    if (note) text += " · " + note;
    status.textContent = text;
    panel.dataset.elapsedMs = String(ms);
  }

  async function swapFromPage() {
    const resp = await fetch(window.location.href, {
      headers: {"X-Console-Refresh": "1", "X-Console-Regions": "healing-run,healing-history"},
      credentials: "same-origin",
      cache: "no-store",
    });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    ["healing-run", "healing-history"].forEach(function (id) {
      const fresh = doc.getElementById(id);
      const current = document.getElementById(id);
      if (fresh && current) current.replaceWith(document.importNode(fresh, true));
    });
  }

  async function poll() {
    let next = elapsed() > SLOW_AFTER_MS ? 5000 : 2000;
    try {
      const resp = await fetch(panel.dataset.url, {
        headers: {Accept: "application/json"},
        credentials: "same-origin",
        cache: "no-store",
      });
      if (resp.status === 404) {
        showRunning("");
      } else if (resp.ok) {
        status.textContent = "finished; loading the result";
        await swapFromPage();
        return;
      } else {
        showRunning("status unavailable (HTTP " + resp.status + "), retrying");
        next = 5000;
      }
    } catch (err) {
      showRunning("status unavailable (" + err.message + "), retrying");
      next = 5000;
    }
    setTimeout(poll, next);
  }

  setInterval(function () {
    if (panel.isConnected && panel.dataset.state === "running") showRunning("");
  }, 1000);
  poll();
})();
