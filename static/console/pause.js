// The table page's Pause and Resume: dialogs that require a reason, then
// POST /tables/<t>/pauseConsumption?comment=..[&partitions=..] or
// POST /tables/<t>/resumeConsumption?consumeFrom=..&comment=..[&partitions=..]
// (CSRF token, X-Console-Page: 1). A pause then shows a job panel: GET /tables/<t>/pauseStatus
// every 2 s, each segment the pause is committing marked done once it is no longer CONSUMING,
// until 100 %. A resume shows the new consuming segments.
(function () {
  "use strict";
  const panel = document.getElementById("pause-job");
  if (!panel) return;
  const bar = document.getElementById("pause-job-bar");
  const title = document.getElementById("pause-job-title");
  const progress = document.getElementById("pause-job-progress");
  const list = document.getElementById("pause-job-segments");
  const POLL_MS = 2000;

  function csrf(form) {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function ticked(form) {
    const scope = form.querySelector("input[name=scope]:checked");
    if (!scope || scope.value !== "partitions") return null;
    return Array.from(form.querySelectorAll("input[name=partition]:checked")).map(function (b) { return b.value; });
  }

  function show(name, segments, state) {
    panel.hidden = false;
    title.textContent = name;
    list.replaceChildren();
    segments.forEach(function (segment) {
      const item = document.createElement("li");
      item.dataset.segment = segment;
      item.dataset.state = state;
      item.textContent = segment + " · " + state;
      list.appendChild(item);
    });
  }

  function render(pending) {
    const items = Array.from(list.children);
    let done = 0;
    items.forEach(function (item) {
      const committed = !pending.has(item.dataset.segment);
      item.dataset.state = committed ? "committed" : "committing";
      item.textContent = item.dataset.segment + " · " + item.dataset.state;
      if (committed) done += 1;
    });
    const percent = items.length ? Math.floor((100 * done) / items.length) : 100;
    bar.value = percent;
    panel.dataset.percent = String(percent);
    progress.textContent = percent + " % (" + done + " of " + items.length + " segments committed)";
    return percent;
  }

  async function watch(url) {
    try {
      const resp = await fetch(url, {headers: {Accept: "application/json"}, credentials: "same-origin", cache: "no-store"});
      const body = await resp.json();
      if (!resp.ok) throw new Error(body.error || body.detail || "HTTP " + resp.status);
      if (render(new Set(body.consumingSegments || [])) < 100) {
        setTimeout(function () { watch(url); }, POLL_MS);
      } else {
        panel.dataset.state = "done";
        progress.textContent = "100 %: every consuming segment committed; consumption is paused";
      }
    } catch (err) {
      progress.textContent = "status unavailable (" + err.message + "); retrying";
      setTimeout(function () { watch(url); }, POLL_MS * 3);
    }
  }

  async function post(form, params) {
    const query = new URLSearchParams(params);
    const resp = await fetch(form.dataset.url + "?" + query.toString(), {
      method: "POST",
      credentials: "same-origin",
      headers: {"X-CSRFToken": csrf(form), "X-Console-Page": "1", Accept: "application/json"},
    });
    const body = await resp.json().catch(function () { return {}; });
    if (!resp.ok) throw new Error(body.error || body.detail || "HTTP " + resp.status);
    return body;
  }

  function bind(name, onDone) {
    const button = document.getElementById(name + "-button");
    const dialog = document.getElementById(name + "-dialog");
    const form = document.getElementById(name + "-form");
    const reason = document.getElementById(name + "-reason");
    const error = document.getElementById(name + "-error");
    const submit = document.getElementById(name + "-submit");
    if (!button || !dialog) return;
    button.addEventListener("click", function () {
      error.textContent = "";
      submit.disabled = false;
      dialog.showModal();
      reason.focus();
    });
    dialog.querySelector("[data-close]").addEventListener("click", function () { dialog.close(); });
    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      const comment = reason.value.trim();
      if (comment.length < 3) {
        error.textContent = "Say why (at least 3 characters): it goes to the audit log.";
        reason.focus();
        return;
      }
      const params = {comment: comment};
      const partitions = ticked(form);
      if (partitions !== null) {
        if (!partitions.length) { error.textContent = "Tick at least one partition."; return; }
        params.partitions = partitions.join(",");
      }
      const from = form.querySelector("input[name=consumeFrom]:checked");
      if (from) params.consumeFrom = from.value;
      submit.disabled = true;
      error.textContent = "";
      try {
        const body = await post(form, params);
        reason.value = "";
        dialog.close();
        onDone(form, body, params);
      } catch (err) {
        error.textContent = name[0].toUpperCase() + name.slice(1) + " refused: " + err.message;
        submit.disabled = false;
      }
    });
    button.disabled = false; // usable only once bound
  }

  bind("pause", function (form, body, params) {
    const scope = params.partitions ? "Pause of partitions " + params.partitions : "Pause";
    panel.dataset.state = "running";
    show(scope, body.consumingSegments || [], "committing");
    render(new Set(body.consumingSegments || []));
    watch(form.dataset.statusUrl);
  });
  bind("resume", function (form, body, params) {
    panel.dataset.state = "resumed";
    show("Resume from " + params.consumeFrom, body.consumingSegments || [], "consuming");
    bar.value = 100;
    panel.dataset.percent = "100";
    progress.textContent = "consumption restarted: " + (body.consumingSegments || []).length +
      " consuming segment(s); skipped offsets, if any, are listed under Recent operator actions";
  });
})();
