// Bulk pause / resume on the Tables page: "Preview (dry run)" POSTs /api/v1/bulk/<action> with
// dryRun=true and lists what would change; "Apply" (enabled only after a preview of the same
// selection) POSTs dryRun=false with the reason and shows each table's result.
(function () {
  "use strict";
  const form = document.getElementById("bulk-form");
  if (!form) return;
  const error = document.getElementById("bulk-error");
  const result = document.getElementById("bulk-result");
  const apply = document.getElementById("bulk-apply");
  const preview = document.getElementById("bulk-preview");
  let previewed = null; // the selection the shown preview is for

  function selection() {
    const action = form.elements.action.value;
    const params = new URLSearchParams();
    const tenant = form.elements.tenant.value;
    if (tenant) params.set("tenant", tenant);
    else params.set("tables", form.elements.tables.value.trim());
    if (action === "resume") params.set("consumeFrom", form.elements.consumeFrom.value);
    return {action: action, params: params};
  }

  function key(sel) { return sel.action + "?" + sel.params.toString(); }

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  function show(body) {
    const rows = result.querySelector("tbody");
    rows.replaceChildren();
    body.tables.forEach(function (item) {
      const tr = document.createElement("tr");
      tr.dataset.table = item.table;
      tr.dataset.result = item.result || "preview";
      tr.appendChild(cell(item.table));
      tr.appendChild(cell(item.pauseFlag === undefined ? "?" : (item.pauseFlag ? "yes" : "no")));
      tr.appendChild(cell(String((item.consumingSegments || []).length)));
      tr.appendChild(cell(item.change || ""));
      tr.appendChild(cell(item.result ? item.result + (item.error ? ": " + item.error : "") : "dry run"));
      rows.appendChild(tr);
    });
    result.hidden = false;
    result.dataset.dryRun = String(body.dryRun);
  }

  async function send(sel, dryRun) {
    const params = new URLSearchParams(sel.params);
    params.set("dryRun", dryRun ? "true" : "false");
    if (!dryRun) params.set("comment", form.elements.comment.value.trim());
    const url = form.dataset["url" + sel.action[0].toUpperCase() + sel.action.slice(1)];
    const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    const resp = await fetch(url + "?" + params.toString(), {
      method: "POST",
      credentials: "same-origin",
      headers: {"X-CSRFToken": csrf, "X-Console-Page": "1", Accept: "application/json"},
    });
    const body = await resp.json().catch(function () { return {}; });
    if (!resp.ok) throw new Error(body.error || body.detail || "HTTP " + resp.status);
    return body;
  }

  form.addEventListener("change", function () {
    if (previewed !== key(selection())) apply.disabled = true;
  });
  form.addEventListener("input", function () {
    if (previewed !== key(selection())) apply.disabled = true;
  });
  preview.addEventListener("click", async function () {
    error.textContent = "";
    const sel = selection();
    try {
      show(await send(sel, true));
      previewed = key(sel);
      apply.disabled = false;
    } catch (err) {
      error.textContent = "Preview refused: " + err.message;
    }
  });
  apply.addEventListener("click", async function () {
    error.textContent = "";
    const sel = selection();
    if (previewed !== key(sel)) { apply.disabled = true; return; }
    if (form.elements.comment.value.trim().length < 3) {
      error.textContent = "Say why (at least 3 characters): it goes to the audit log.";
      return;
    }
    apply.disabled = true;
    try {
      show(await send(sel, false));
      previewed = null;
    } catch (err) {
      error.textContent = "Refused: " + err.message;
      apply.disabled = false;
    }
  });
})();
