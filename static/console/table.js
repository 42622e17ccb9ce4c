// The table page's Force commit: a dialog that requires a reason, then
// POST /tables/<table>/forceCommit?comment=<reason> (CSRF token, X-Console-Page: 1), then polls
// /tables/forceCommitStatus/<jobId> until numberOfSegmentsYetToBeCommitted reaches 0.
(function () {
  "use strict";
  const button = document.getElementById("force-commit-button");
  const dialog = document.getElementById("force-commit-dialog");
  if (!button || !dialog) return;
  const form = document.getElementById("force-commit-form");
  const reason = document.getElementById("force-commit-reason");
  const error = document.getElementById("force-commit-error");
  const submit = document.getElementById("force-commit-submit");
  const job = document.getElementById("force-commit-job");
  const jobLink = document.getElementById("force-commit-job-link");
  const progress = document.getElementById("force-commit-progress");
  const POLL_MS = 2000;

  function csrfToken() {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function poll(url) {
    try {
      const resp = await fetch(url, {headers: {Accept: "application/json"}, credentials: "same-origin", cache: "no-store"});
      const body = await resp.json();
      if (!resp.ok) throw new Error(body.error || body.detail || "HTTP " + resp.status);
      const left = Number(body.numberOfSegmentsYetToBeCommitted);
      job.dataset.remaining = String(left);
      if (left > 0 || Number.isNaN(left)) {
        progress.textContent = (Number.isNaN(left) ? "?" : left) + " segment(s) yet to be committed";
        setTimeout(function () { poll(url); }, POLL_MS);
      } else {
        job.dataset.state = "done";
        progress.textContent = "done: every segment committed";
      }
    } catch (err) {
      job.dataset.state = "error";
      progress.textContent = "status unavailable (" + err.message + "); retrying";
      setTimeout(function () { poll(url); }, POLL_MS * 3);
    }
  }

  button.addEventListener("click", function () {
    error.textContent = "";
    submit.disabled = false;
    dialog.showModal();
    reason.focus();
  });
  document.getElementById("force-commit-cancel").addEventListener("click", function () {
    dialog.close();
  });
  // Rendered disabled: usable only once this script has bound it (a click before would be lost).
  button.disabled = false;

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const comment = reason.value.trim();
    if (comment.length < 3) {
      error.textContent = "Say why (at least 3 characters): it goes to the audit log.";
      reason.focus();
      return;
    }
    submit.disabled = true;
    error.textContent = "";
    try {
      const resp = await fetch(form.dataset.url + "?comment=" + encodeURIComponent(comment), {
        method: "POST",
        credentials: "same-origin",
        headers: {"X-CSRFToken": csrfToken(), "X-Console-Page": "1", Accept: "application/json"},
      });
      const body = await resp.json().catch(function () { return {}; });
      if (!resp.ok || !body.forceCommitJobId) {
        throw new Error(body.error || body.detail || "HTTP " + resp.status);
      }
      const jobId = body.forceCommitJobId;
      const statusUrl = form.dataset.statusUrl.replace("JOB_ID", encodeURIComponent(jobId));
      job.hidden = false;
      job.dataset.jobId = jobId;
      job.dataset.state = "running";
      jobLink.textContent = jobId;
      jobLink.href = statusUrl;
      progress.textContent = "submitted";
      reason.value = "";
      dialog.close();
      poll(statusUrl);
    } catch (err) {
      error.textContent = "Force commit refused: " + err.message;
      submit.disabled = false;
    }
  });
})();
