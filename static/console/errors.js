// The errors page's Reset (operators): POST /segments/<t>/<segment>/reset (Pinot's reset: every
// replica that is not OFFLINE gets a STATE_TRANSITION to OFFLINE, then follows the IdealState
// back). The first click arms the button ("Confirm reset?"), a second within 5 s sends it, with
// the CSRF token and X-Console-Page: 1 (audited as from the page). The answer (the instances
// messaged, or why nothing was sent, or the refusal) shows in the row, which is then fetched
// again from the page; answers survive the page's auto-refresh.
(function () {
  "use strict";
  const tokenInput = document.querySelector("#reset-csrf input[name=csrfmiddlewaretoken]");
  const answers = new Map(); // "<table>/<segment>" -> {text, ok}
  const ARM_MS = 5000;

  function key(row) {
    return row.dataset.table + "/" + row.dataset.segment;
  }

  function rowFor(root, table, segment) {
    return root.querySelector(
      'tr[data-table="' + CSS.escape(table) + '"][data-segment="' + CSS.escape(segment) + '"]'
    );
  }

  function showAnswer(row) {
    const answer = answers.get(key(row));
    const slot = row.querySelector(".reset-answer");
    if (!answer || !slot) return;
    slot.textContent = answer.text;
    slot.className = "reset-answer small " + (answer.ok ? "" : "error");
    row.dataset.resetState = answer.ok ? "sent" : "refused";
  }

  function describe(body) {
    const sent = body.instances || [];
    if (!sent.length) return "nothing sent: " + (body.note || "no replica needed a reset");
    return "reset sent to " + sent.join(", ") + "; the replicas come back as the servers reload";
  }

  async function reloadRow(table, segment) {
    const resp = await fetch(window.location.href, {
      headers: {"X-Console-Refresh": "1", "X-Console-Regions": "errors-region"},
      credentials: "same-origin",
      cache: "no-store",
    });
    if (!resp.ok) return;
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    const current = rowFor(document, table, segment);
    const fresh = rowFor(doc, table, segment);
    if (!current) return;
    if (fresh) {
      const imported = document.importNode(fresh, true);
      current.replaceWith(imported);
      showAnswer(imported);
    } else {
      current.dataset.gone = "true";
      current.classList.add("muted");
    }
  }

  async function reset(button) {
    const row = button.closest("tr");
    const table = row.dataset.table;
    const segment = row.dataset.segment;
    button.disabled = true;
    button.textContent = "Resetting…";
    let answer;
    try {
      const resp = await fetch(button.dataset.resetUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "X-CSRFToken": tokenInput ? tokenInput.value : "",
          "X-Console-Page": "1",
          Accept: "application/json",
        },
      });
      const body = await resp.json().catch(function () { return {}; });
      answer = resp.ok
        ? {text: describe(body), ok: true}
        : {text: "refused: " + (body.error || body.detail || "HTTP " + resp.status), ok: false};
    } catch (err) {
      answer = {text: "failed: " + err.message, ok: false};
    }
    answers.set(table + "/" + segment, answer);
    button.disabled = false;
    showArmed(button);
    showAnswer(row);
    try {
      await reloadRow(table, segment);
    } catch (err) {
      // the page's own refresh brings the row back later
    }
  }

  // The armed row is kept here, not on the button: the page's auto-refresh may swap the row
  // between the two clicks.
  let armed = {key: "", until: 0};

  function showArmed(button) {
    const on = armed.key === key(button.closest("tr")) && Date.now() < armed.until;
    if (button.disabled) return;
    button.textContent = on ? "Confirm reset?" : "Reset";
    button.classList.toggle("danger", on);
    if (on) button.dataset.armed = "true";
    else delete button.dataset.armed;
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest(".reset-button");
    if (!button || button.disabled) return;
    const row = button.closest("tr");
    if (armed.key !== key(row) || Date.now() >= armed.until) {
      armed = {key: key(row), until: Date.now() + ARM_MS};
      document.querySelectorAll(".reset-button").forEach(showArmed);
      setTimeout(function () {
        document.querySelectorAll(".reset-button").forEach(showArmed);
      }, ARM_MS + 50);
      return;
    }
    armed = {key: "", until: 0};
    reset(button);
  });

  document.addEventListener("console:refreshed", function () {
    document.querySelectorAll("#error-segments tr[data-segment]").forEach(showAnswer);
    document.querySelectorAll(".reset-button").forEach(showArmed);
  });
})();
