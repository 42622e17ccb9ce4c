// The ZooKeeper browser (/ui/zk/): a tree expanded through GET /zk/ls?path=, and for the selected
// znode its data (GET /zk/get, shown as formatted JSON; the X-ZK-Version header is the version of
// exactly that data) and its stat (GET /zk/stat).
// Admins (the page renders the editor only for them) edit the data: a line diff of the loaded and
// the edited JSON is previewed before saving, a reason is required, and the save is
// PUT /zk/put?path=&expectedVersion=<the version loaded>&comment=<reason> with the ZNRecord as the
// JSON body (CSRF token, X-Console-Page: 1). A stale version is refused by the server (409): its
// message is shown and nothing changes; a save shows the new version and reloads the znode.
(function () {
  "use strict";
  const root = document.getElementById("zk");
  if (!root) return;
  const tree = document.getElementById("zk-tree");
  const title = document.getElementById("zk-path");
  const status = document.getElementById("zk-status");
  const dataBox = document.getElementById("zk-data");
  const statBody = document.querySelector("#zk-stat tbody");
  const editButton = document.getElementById("zk-edit");
  const editor = document.getElementById("zk-editor");
  const result = document.getElementById("zk-result");
  const DIFF_CELLS = 4000000; // beyond this many LCS cells the middle is shown as replaced
  let current = null; // {path, version, text}
  let edited = null; // the parsed JSON of the last preview

  function join(parent, name) {
    return (parent === "/" ? "" : parent) + "/" + name;
  }

  async function call(url, options) {
    const resp = await fetch(url, Object.assign({credentials: "same-origin", cache: "no-store", headers: {Accept: "application/json"}}, options || {}));
    let body = null;
    if (resp.status !== 204) {
      const text = await resp.text();
      try { body = text ? JSON.parse(text) : null; } catch (err) { body = text; }
    }
    if (!resp.ok) {
      const message = body && body.error ? body.error : "HTTP " + resp.status;
      const error = new Error(message);
      error.status = resp.status;
      throw error;
    }
    return {resp: resp, body: body};
  }

  // --- the tree ------------------------------------------------------------------------------
  function item(path, name) {
    const li = document.createElement("li");
    li.setAttribute("role", "treeitem");
    li.setAttribute("aria-expanded", "false");
    li.dataset.path = path;
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "zk-toggle";
    toggle.textContent = "▸";
    toggle.setAttribute("aria-label", "expand " + path);
    toggle.addEventListener("click", function () { expand(li, li.getAttribute("aria-expanded") !== "true"); });
    const label = document.createElement("button");
    label.type = "button";
    label.className = "zk-name";
    label.textContent = name;
    label.title = path;
    label.addEventListener("click", function () { select(path); });
    const children = document.createElement("ul");
    children.setAttribute("role", "group");
    children.hidden = true;
    li.append(toggle, label, children);
    return li;
  }

  async function expand(li, open) {
    const children = li.querySelector(":scope > ul");
    const toggle = li.querySelector(":scope > .zk-toggle");
    if (open && !li.dataset.loaded) {
      try {
        const names = (await call("/zk/ls?path=" + encodeURIComponent(li.dataset.path))).body || [];
        children.replaceChildren.apply(children, names.map(function (n) { return item(join(li.dataset.path, n), n); }));
        li.dataset.loaded = "true";
        li.dataset.children = String(names.length);
        if (!names.length) toggle.style.visibility = "hidden";
      } catch (err) {
        status.textContent = "listing " + li.dataset.path + " failed: " + err.message;
        return;
      }
    }
    children.hidden = !open;
    li.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "▾" : "▸";
  }

  function findItem(path) {
    return Array.from(tree.querySelectorAll("li[data-path]")).find(function (li) { return li.dataset.path === path; });
  }

  async function reveal(path) {
    const parts = path.split("/").filter(Boolean);
    let at = "/";
    await expand(findItem("/"), true);
    for (let i = 0; i < parts.length; i += 1) {
      at = join(at, parts[i]);
      const li = findItem(at);
      if (!li) return;
      await expand(li, true);
    }
  }

  // --- the selected znode --------------------------------------------------------------------
  function formatted(data) {
    if (data === null || data === undefined) return "";
    return typeof data === "string" ? data : JSON.stringify(data, null, 2);
  }

  function showStat(stat) {
    statBody.replaceChildren();
    Object.keys(stat).forEach(function (key) {
      const row = document.createElement("tr");
      row.dataset.stat = key;
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = key;
      const td = document.createElement("td");
      td.className = "mono";
      td.dataset.value = String(stat[key]);
      td.textContent = (key === "ctime" || key === "mtime") && stat[key] > 0
        ? stat[key] + " (" + new Date(stat[key]).toISOString() + ")" : String(stat[key]);
      row.append(th, td);
      statBody.appendChild(row);
    });
  }

  async function select(path) {
    tree.querySelectorAll(".zk-name[aria-current]").forEach(function (b) { b.removeAttribute("aria-current"); });
    const li = findItem(path);
    if (li) li.querySelector(":scope > .zk-name").setAttribute("aria-current", "true");
    title.textContent = path;
    root.dataset.path = path;
    status.textContent = "loading…";
    if (editButton) editButton.disabled = true;
    try {
      const got = await call("/zk/get?path=" + encodeURIComponent(path));
      const stat = (await call("/zk/stat?path=" + encodeURIComponent(path))).body;
      const text = formatted(got.body);
      current = {path: path, version: Number(got.resp.headers.get("X-ZK-Version")), text: text};
      dataBox.textContent = text || "(no data)";
      dataBox.dataset.version = String(current.version);
      showStat(stat);
      status.textContent = "version " + current.version + " · " + stat.numChildren + " child(ren) · " + stat.dataLength + " bytes stored";
      if (editButton) editButton.disabled = false;
    } catch (err) {
      current = null;
      dataBox.textContent = "";
      statBody.replaceChildren();
      status.textContent = path + ": " + err.message;
    }
  }

  // --- the editor (admins) -------------------------------------------------------------------
  function lineDiff(a, b) {
    let start = 0;
    while (start < a.length && start < b.length && a[start] === b[start]) start += 1;
    let endA = a.length, endB = b.length;
    while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA -= 1; endB -= 1; }
    const out = a.slice(0, start).map(function (l) { return [" ", l]; });
    const x = a.slice(start, endA), y = b.slice(start, endB);
    if (x.length * y.length > DIFF_CELLS) {
      x.forEach(function (l) { out.push(["-", l]); });
      y.forEach(function (l) { out.push(["+", l]); });
    } else {
      const w = y.length + 1;
      const lcs = new Uint32Array((x.length + 1) * w);
      for (let i = x.length - 1; i >= 0; i -= 1) {
        for (let j = y.length - 1; j >= 0; j -= 1) {
          lcs[i * w + j] = x[i] === y[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
        }
      }
      let i = 0, j = 0;
      while (i < x.length || j < y.length) {
        if (i < x.length && j < y.length && x[i] === y[j]) { out.push([" ", x[i]]); i += 1; j += 1; }
        else if (i < x.length && (j === y.length || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) { out.push(["-", x[i]]); i += 1; }
        else { out.push(["+", y[j]]); j += 1; }
      }
    }
    a.slice(endA).forEach(function (l) { out.push([" ", l]); });
    return out;
  }

  function say(text, state) {
    result.textContent = text;
    result.dataset.state = state;
  }

  function openEditor() {
    if (!current) return;
    document.getElementById("zk-editor-version").textContent = String(current.version);
    document.getElementById("zk-editor-path").textContent = current.path;
    editor.dataset.version = String(current.version);
    editor.dataset.path = current.path;
    editor.dataset.original = current.text;
    document.getElementById("zk-text").value = current.text;
    document.getElementById("zk-diff").replaceChildren();
    document.getElementById("zk-save").disabled = true;
    edited = null;
    say("", "");
    editor.hidden = false;
  }

  function preview() {
    const diffBox = document.getElementById("zk-diff");
    diffBox.replaceChildren();
    document.getElementById("zk-save").disabled = true;
    try {
      edited = JSON.parse(document.getElementById("zk-text").value);
    } catch (err) {
      edited = null;
      say("not JSON: " + err.message, "error");
      return;
    }
    const before = editor.dataset.original ? editor.dataset.original.split("\n") : [];
    const lines = lineDiff(before, JSON.stringify(edited, null, 2).split("\n"));
    let changed = 0;
    lines.forEach(function (pair) {
      const span = document.createElement("span");
      span.className = pair[0] === "+" ? "add" : pair[0] === "-" ? "del" : "same";
      span.textContent = pair[0] + " " + pair[1] + "\n";
      diffBox.appendChild(span);
      if (pair[0] !== " ") changed += 1;
    });
    diffBox.dataset.changed = String(changed);
    say(changed ? changed + " line(s) change; give a reason and save" : "no change", changed ? "" : "error");
    document.getElementById("zk-save").disabled = changed === 0;
  }

  async function save() {
    const reason = document.getElementById("zk-reason").value.trim();
    if (!reason) { say("a reason is required", "error"); return; }
    if (edited === null) { say("preview the diff first", "error"); return; }
    const path = editor.dataset.path;
    const query = new URLSearchParams({path: path, expectedVersion: editor.dataset.version, comment: reason});
    const token = editor.querySelector("input[name=csrfmiddlewaretoken]").value;
    document.getElementById("zk-save").disabled = true;
    try {
      const done = await call("/zk/put?" + query.toString(), {
        method: "PUT",
        headers: {"X-CSRFToken": token, "X-Console-Page": "1", "Content-Type": "application/json", Accept: "application/json"},
        body: JSON.stringify(edited),
      });
      editor.hidden = true;
      await select(path);
      say("saved: " + path + " is now at version " + done.body.version, "ok");
      result.dataset.version = String(done.body.version);
    } catch (err) {
      say("refused (" + (err.status || "network") + "): " + err.message, "error");
      document.getElementById("zk-save").disabled = false;
    }
  }

  if (editButton) {
    editButton.addEventListener("click", openEditor);
    document.getElementById("zk-preview").addEventListener("click", preview);
    document.getElementById("zk-save").addEventListener("click", save);
    document.getElementById("zk-cancel").addEventListener("click", function () { editor.hidden = true; say("", ""); });
    document.getElementById("zk-text").addEventListener("input", function () {
      edited = null;
      document.getElementById("zk-save").disabled = true;
    });
  }

  tree.appendChild(item("/", "/"));
  reveal(root.dataset.start).then(function () { return select(root.dataset.start); });
})();
