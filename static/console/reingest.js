// The table page's re-ingestion (console.api.reingest):
// - Re-ingest (operators), on a COMMITTING segment of the "Committing / missing download URL"
//   section: the first click arms the button ("Confirm re-ingest?"), a second within 5 s posts
//   /api/v1/tables/<t>/segments/<segment>/reingest with the CSRF token and X-Console-Page: 1
//   (audited as from the page; both through static/console/actions.js). The server's answer shows
//   in the row: the job id and the server, or the refusal with the server's message. Answers
//   survive the page's auto-refresh.
// - "Running on the table's servers": GET /api/v1/tables/<t>/reingestJobs every few seconds while
//   the tab is visible (and at once after a Re-ingest), one row per running job with its elapsed
//   time ticking; servers that did not answer are named in the status line.
(function () {
  "use strict";
  const section = document.getElementById("reingest");
  if (!section) return;
  const tokenInput = document.querySelector("#reingest-csrf input[name=csrfmiddlewaretoken]");
  const jobsUrl = section.dataset.jobsUrl;
  const answers = new Map(); // segment -> {text, ok}
  const POLL_MS = 3000;
  let jobs = [];
  let fetchedAt = 0;

  // --- the button ---------------------------------------------------------------------------
  function showAnswer(row) {
    const answer = answers.get(row.dataset.segment);
    const slot = row.querySelector(".reingest-answer");
    if (!answer || !slot) return;
    slot.textContent = answer.text;
    slot.className = "reingest-answer small " + (answer.ok ? "" : "error");
    row.dataset.reingestState = answer.ok ? "started" : "refused";
  }

  async function reingest(button) {
    const segment = button.closest("tr").dataset.segment;
    button.disabled = true;
    button.textContent = "Asking…";
    let answer;
    try {
      const resp = await window.ConsoleActions.post(button.dataset.reingestUrl, tokenInput);
      const body = resp.body;
      answer = resp.ok
        ? {text: "job " + body.jobId + " started on " + body.server, ok: true}
        : {text: "refused (HTTP " + resp.status + "): " + (body.error || body.detail || "no reason given"), ok: false};
    } catch (err) {
      answer = {text: "failed: " + err.message, ok: false};
    }
    answers.set(segment, answer);
    button.disabled = false;
    const current = document.querySelector('#deep-store-segments tr[data-segment="' + CSS.escape(segment) + '"]');
    if (current) showAnswer(current);
    buttons.refresh();
    pollJobs();
  }

  const buttons = window.ConsoleActions.twoClick({
    selector: ".reingest-button",
    keyOf: function (button) { return button.closest("tr").dataset.segment; },
    idle: "Re-ingest",
    confirm: "Confirm re-ingest?",
    run: reingest,
  });

  document.addEventListener("console:refreshed", function () {
    document.querySelectorAll("#deep-store-segments tr[data-segment]").forEach(showAnswer);
    buttons.refresh();
  });

  // --- the running jobs ---------------------------------------------------------------------
  function duration(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + String(s % 60).padStart(2, "0") + " s";
    return Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " min";
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function renderJobs() {
    const body = document.querySelector("#reingest-jobs tbody");
    if (!body) return;
    body.replaceChildren();
    if (!jobs.length) {
      const row = document.createElement("tr");
      row.className = "empty";
      cell(row, "None running.").colSpan = 5;
      body.appendChild(row);
      return;
    }
    jobs.forEach(function (job) {
      const row = document.createElement("tr");
      row.dataset.jobId = job.jobId || "";
      row.dataset.segment = job.segmentName;
      row.dataset.server = job.server;
      cell(row, job.segmentName, "mono");
      cell(row, job.server, "mono small");
      cell(row, job.jobId || "?", "mono small");
      const started = typeof job.startTimeMs === "number" ? new Date(job.startTimeMs) : null;
      cell(row, started ? started.toISOString().slice(11, 19) + " UTC" : "–", "small");
      cell(row, "", "small").dataset.field = "elapsed";
      body.appendChild(row);
    });
    tick();
  }

  function tick() {
    const since = Date.now() - fetchedAt;
    document.querySelectorAll("#reingest-jobs tr[data-job-id]").forEach(function (row, i) {
      const job = jobs[i];
      const slot = row.querySelector('[data-field="elapsed"]');
      if (job && slot) slot.textContent = typeof job.elapsedMs === "number" ? duration(job.elapsedMs + since) : "–";
    });
  }

  function showStatus(text, state) {
    const status = document.getElementById("reingest-jobs-status");
    if (!status) return;
    status.textContent = text;
    status.dataset.state = state;
    status.classList.toggle("error", state === "error");
  }

  function describe(answer) {
    const servers = answer.servers || [];
    const answered = servers.filter(function (s) { return s.answered; }).length;
    const silent = servers.filter(function (s) { return !s.answered; });
    let text = answered + " of " + servers.length + " server(s) answered";
    if (silent.length) {
      text += "; " + silent.map(function (s) { return s.server + ": " + s.error; }).join("; ");
    }
    return {text: text, state: silent.length ? "partial" : "ok"};
  }

  let polling = false;
  async function pollJobs() {
    if (polling || !jobsUrl) return;
    polling = true;
    try {
      const resp = await fetch(jobsUrl, {
        credentials: "same-origin",
        cache: "no-store",
        headers: {Accept: "application/json"},
      });
      const body = await resp.json().catch(function () { return {}; });
      if (!resp.ok) throw new Error(body.error || "HTTP " + resp.status);
      jobs = body.jobs || [];
      fetchedAt = Date.now();
      renderJobs();
      const said = describe(body);
      showStatus(said.text, said.state);
      section.dataset.jobCount = String(jobs.length);
    } catch (err) {
      showStatus("could not ask the servers: " + err.message, "error");
    } finally {
      polling = false;
    }
  }

  setInterval(tick, 1000);
  setInterval(function () {
    if (document.visibilityState === "visible") pollJobs();
  }, POLL_MS);
  pollJobs();
})();
