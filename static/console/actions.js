// Shared by the pages' operator buttons (errors.js Reset, reingest.js Re-ingest):
// - ConsoleActions.post(url, tokenInput) posts with the CSRF token of `tokenInput` and
//   X-Console-Page: 1 (audited as from the page); it resolves to {ok, status, body}, body {} when
//   the answer is not JSON, and rejects only when the request could not be made.
// - ConsoleActions.twoClick({selector, keyOf, idle, confirm, run}): the first click on a button
//   matching `selector` arms it for 5 s (label `confirm`, class danger, data-armed); a second click
//   on a button of the same key (`keyOf(button)`) within that time calls `run(button)`. The armed
//   key is kept here, not on the button: the page's auto-refresh may swap the row between the two
//   clicks. Returns {refresh}: redraws every matching button (after the page swapped rows).
(function () {
  "use strict";
  const ARM_MS = 5000;

  async function post(url, tokenInput) {
    const resp = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "X-CSRFToken": tokenInput ? tokenInput.value : "",
        "X-Console-Page": "1",
        Accept: "application/json",
      },
    });
    const body = await resp.json().catch(function () { return {}; });
    return {ok: resp.ok, status: resp.status, body: body};
  }

  function twoClick(options) {
    let armed = {key: "", until: 0};

    function show(button) {
      if (button.disabled) return;
      const on = armed.key === options.keyOf(button) && Date.now() < armed.until;
      button.textContent = on ? options.confirm : options.idle;
      button.classList.toggle("danger", on);
      if (on) button.dataset.armed = "true";
      else delete button.dataset.armed;
    }

    function refresh() {
      document.querySelectorAll(options.selector).forEach(show);
    }

    document.addEventListener("click", function (event) {
      const button = event.target.closest(options.selector);
      if (!button || button.disabled) return;
      const key = options.keyOf(button);
      if (armed.key !== key || Date.now() >= armed.until) {
        armed = {key: key, until: Date.now() + ARM_MS};
        refresh();
        setTimeout(refresh, ARM_MS + 50);
        return;
      }
      armed = {key: "", until: 0};
      options.run(button);
    });
    return {refresh: refresh};
  }

  window.ConsoleActions = {post: post, twoClick: twoClick};
})();
