// The errors page's Reset (operators): POST /segments/<t>/<segment>/reset (Pinot's reset: every
// replica that is not OFFLINE gets a STATE_TRANSITION to OFFLINE, then follows the IdealState
// back). The first click arms the button ("Confirm reset?"), a second within 5 s sends it, with
// the CSRF token and X-Console-Page: 1 (audited as from the page; both through
// static/console/actions.js). The answer (the instances
// messaged, or why nothing was sent, or the refusal) shows in the row, which is then fetched
// again from the page; answers survive the page's auto-refresh.
(function () {
  "use strict";
  const tokenInput = document.querySelector("#reset-csrf input[name=csrfmiddlewaretoken]");
  const answers = new Map(); // "<table>/<segment>" -> {text, ok}

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
      const resp = await window.ConsoleActions.post(button.dataset.resetUrl, tokenInput);
      const body = resp.body;
      answer = resp.ok
        ? {text: describe(body), ok: true}
        : {text: "refused: " + (body.error || body.detail || "HTTP " + resp.status), ok: false};
    } catch (err) {
      answer = {text: "failed: " + err.message, ok: false};
    }
    answers.set(table + "/" + segment, answer);
    button.disabled = false;
    buttons.refresh();
    showAnswer(row);
    try {
      await reloadRow(table, segment);
    } catch (err) {
      // the page's own refresh brings the row back later
    }
  }

  const buttons = window.ConsoleActions.twoClick({
    selector: ".reset-button",
    keyOf: function (button) { return key(button.closest("tr")); },
    idle: "Reset",
    confirm: "Confirm reset?",
    run: reset,
  });

  document.addEventListener("console:refreshed", function () {
    document.querySelectorAll("#error-segments tr[data-segment]").forEach(showAnswer);
    buttons.refresh();
  });
})();
