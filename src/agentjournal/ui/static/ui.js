// agentjournal viewer: draws the page from the JSON embedded in it (#aj-data).
// Every stored value is written with textContent, never as markup. A live page
// (body[data-mode=live]) listens to server-sent events and fetches its data again
// when the store changed; a file (data-mode=file) never touches the network.
"use strict";
(function () {
  var mode = document.body.getAttribute("data-mode");
  var data = JSON.parse(document.getElementById("aj-data").textContent);
  var app = document.getElementById("app");
  var status = document.getElementById("status");
  var view = { tab: "timeline", selected: null, filter: "", at: null };
  // The four integrity states, in the words the command line uses for them.
  var STATE_WORDS = { verified: "verified", untrusted: "untrusted key", unsigned: "unsigned",
    failed: "FAILED" };

  function el(tag, attrs) {
    var node = document.createElement(tag);
    var key;
    for (key in attrs || {}) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "cls") node.className = attrs[key];
      else if (key === "on") node.addEventListener("click", attrs[key]);
      // Through the CSSOM: the pages' policy forbids style attributes, not this.
      else if (key === "style") node.style.cssText = attrs[key];
      else node.setAttribute(key, attrs[key]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }
  function setStatus(text, cls) {
    status.textContent = text;
    status.className = cls || "";
  }

  // -- the sessions list --------------------------------------------------------
  function drawSessions() {
    // A live update redraws the rows only: the filter box keeps its text, focus and caret.
    var body = document.getElementById("rows");
    var warning = document.getElementById("warning");
    if (body) {
      warning.textContent = data.warning || "";
      drawRows(body);
      return;
    }
    app.textContent = "";
    var input = el("input", { type: "search", id: "filter", placeholder: "filter: id, app, user, agent, integrity" });
    input.value = view.filter;
    input.addEventListener("input", function () {
      view.filter = input.value;
      drawRows(document.getElementById("rows"));
    });
    app.appendChild(el("div", { cls: "toolbar" }, input));
    app.appendChild(el("p", { cls: "warning", id: "warning", text: data.warning || "" }));
    var columns = ["session", "app", "user", "agent", "items", "subagents o/c/f", "blocks",
      "refusals", "tokens", "branches", "first", "last", "integrity"];
    var head = el("tr");
    columns.forEach(function (c) { head.appendChild(el("th", { text: c })); });
    body = el("tbody", { id: "rows" });
    app.appendChild(el("div", { cls: "scroll" },
      el("table", { cls: "sessions" }, el("thead", null, head), body)));
    drawRows(body);
  }
  function drawRows(body) {
    body.textContent = "";
    var needle = view.filter.toLowerCase();
    var shown = 0;
    data.rows.forEach(function (row) {
      var hay = [row.session_id, row.app, row.user, row.agent, STATE_WORDS[row.integrity.state]].join(" ").toLowerCase();
      if (needle && hay.indexOf(needle) < 0) return;
      shown++;
      var link = el("a", { href: "sessions/" + encodeURIComponent(row.session_id), text: row.session_id });
      if (mode === "live") link.setAttribute("href", "/sessions/" + encodeURIComponent(row.session_id));
      var s = row.subagents;
      var gone = row.branches.filter(function (b) { return b.deleted; }).length;
      var live = row.branches.length - gone;
      var cells = [link, row.app || "-", row.user || "-", row.agent || "-", String(row.items),
        s.open + "/" + s.closed + "/" + s.failed, String(row.guardrail_blocks), String(row.refusals),
        String(row.tokens), row.branches.length ? live + (gone ? " (+" + gone + " gone)" : "") : "-",
        shortTime(row.first_activity), shortTime(row.last_activity), STATE_WORDS[row.integrity.state]];
      var tr = el("tr", { "data-session": row.session_id });
      cells.forEach(function (c, i) {
        var td = el("td", null, c);
        if (i === cells.length - 1) {
          td.className = "state " + row.integrity.state;
          td.title = row.integrity.text + " (checked " +
            row.integrity.checked_at.slice(0, 19).replace("T", " ") + " UTC)";
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    if (!shown) body.appendChild(el("tr", null, el("td", { colspan: "13", text: data.rows.length ? "no sessions match" : "no sessions" })));
  }

  // -- one session -----------------------------------------------------------------
  function drawSession() {
    app.textContent = "";
    var h = data.header;
    var integrity = data.integrity;
    var facts = el("div", { cls: "facts" },
      el("span", { text: "app " + (h.app || "-") }), el("span", { text: "user " + (h.user || "-") }),
      el("span", { text: "agent " + (h.agent || "-") }),
      el("span", { text: h.events + " events in " + h.streams + " streams" }),
      el("span", { id: "ledger", cls: "state " + integrity.state, text: integrity.text }));
    app.appendChild(facts);
    var lines = drawLines();
    if (lines) app.appendChild(lines);
    var tabs = el("nav", { cls: "tabs" });
    [["timeline", "Timeline"], ["integrity", "Integrity"], ["replay", "Replay"]].forEach(function (t) {
      tabs.appendChild(el("button", { id: "tab-" + t[0], cls: view.tab === t[0] ? "active" : "",
        on: function () { view.tab = t[0]; drawSession(); } }, t[1]));
    });
    app.appendChild(tabs);
    if (view.tab === "timeline") drawTimeline();
    else if (view.tab === "integrity") drawIntegrity();
    else drawReplay();
  }

  // The session's lines: main and every branch (DESIGN §17.4). A live page moves to
  // ?branch=NAME; a saved copy shows one line and names the others.
  function lineQuery() {
    return data.branch ? "&branch=" + encodeURIComponent(data.branch.name) : "";
  }

  function drawLines() {
    var branches = data.branches || [];
    if (!branches.length && !data.branch) return null;
    var box = el("div", { cls: "lines", id: "lines" });
    var b = data.branch;
    box.appendChild(el("span", { id: "line", text: b
      ? "branch " + b.name + (b.deleted ? " [" + b.deleted + "]" : "") + " \u2190 " + b.parent + " " +
        b.where + " · shares " + b.prefix_items + " items with " + b.parent + " before #" + b.next_index
      : "main" }));
    var pick = el("select", { id: "branch-select" });
    pick.appendChild(el("option", { value: "main", text: "main" }));
    branches.forEach(function (one) {
      pick.appendChild(el("option", { value: one.name, text: one.name + " (\u2190 " + one.parent + " " +
        one.where + (one.deleted ? ", " + one.deleted : "") + ")" }));
    });
    pick.value = b ? b.name : "main";
    if (mode === "live") {
      pick.addEventListener("change", function () {
        var target = "/sessions/" + encodeURIComponent(data.session_id);
        if (pick.value !== "main") target += "?branch=" + encodeURIComponent(pick.value);
        window.location.assign(target);
      });
    } else {
      pick.disabled = true;
    }
    box.appendChild(el("label", null, " · show line ", pick));
    return box;
  }

  function drawTree() {
    var list = el("ul", { cls: "tree", id: "tree" });
    data.tree.forEach(function (s) {
      list.appendChild(el("li", { style: "padding-left:" + (s.depth * 1.2) + "em", "data-stream": s.stream },
        el("b", { text: s.agent }), el("span", { cls: "dim", text: " " + s.stream + " · " + s.events })));
    });
    var usage = null;
    if (data.usage) {
      usage = el("table", { cls: "usage", id: "usage" }, el("tr", null, el("th", { text: "agent" }),
        el("th", { text: "requests" }), el("th", { text: "tokens" })));
      data.usage.rows.concat([data.usage.total]).forEach(function (r) {
        usage.appendChild(el("tr", null, el("td", { text: r.key || "total" }),
          el("td", { text: String(r.requests) }), el("td", { text: String(r.total_tokens) })));
      });
    }
    return el("aside", { cls: "side" }, el("h2", { text: "handoff tree" }), list,
      usage ? el("h2", { text: "tokens" }) : null, usage);
  }

  function drawTimeline() {
    var lanes = data.lanes;
    var grid = el("div", { cls: "timeline", id: "timeline",
      style: "grid-template-columns: repeat(" + Math.max(lanes.length, 1) + ", minmax(11em, 1fr))" });
    lanes.forEach(function (name, i) {
      grid.appendChild(el("div", { cls: "lane-head", "data-lane": name, style: "grid-column:" + (i + 1) }, name));
    });
    data.events.forEach(function (e, row) {
      var cls = "event kind-" + e.kind.replace(/[^A-Za-z]/g, "");
      if (e.decision) cls += " decision-" + e.decision.replace(/[^A-Za-z]/g, "");
      if (e.failed) cls += " failed";
      if (view.selected === e.stream + "@" + e.revision) cls += " selected";
      var card = el("div", { cls: cls, "data-stream": e.stream, "data-revision": String(e.revision),
        "data-agent": e.agent, style: "grid-column:" + (e.lane + 1) + ";grid-row:" + (row + 2),
        on: function () { view.selected = e.stream + "@" + e.revision; drawSession(); } },
        el("div", { cls: "kind" }, el("span", { text: e.kind }),
          e.decision ? el("span", { cls: "badge", text: e.decision }) : null,
          el("span", { cls: "where", text: e.where })),
        el("div", { cls: "text", text: e.text }));
      if (e.failed) card.appendChild(el("div", { cls: "problem", text: firstFailure().message }));
      if (e.diff) {
        var diff = el("pre", { cls: "diff" });
        e.diff.forEach(function (d) {
          diff.appendChild(el("span", { cls: d[0] === "+" ? "add" : d[0] === "-" ? "del" : "same", text: d[0] + " " + d[1] + "\n" }));
        });
        card.appendChild(diff);
      }
      grid.appendChild(card);
    });
    var detail = el("section", { cls: "detail", id: "detail" });
    var chosen = data.events.filter(function (e) { return view.selected === e.stream + "@" + e.revision; })[0];
    if (chosen) {
      detail.appendChild(el("h2", { text: chosen.stream + "@" + chosen.revision + " · position " + chosen.position }));
      detail.appendChild(el("pre", { id: "record", text: pretty(chosen.record) }));
    } else {
      detail.appendChild(el("p", { cls: "dim", text: "click an event to see its stored record" }));
    }
    app.appendChild(el("div", { cls: "layout" }, drawTree(), el("div", { cls: "main" }, grid), detail));
    app.appendChild(el("p", { cls: "dim", text: data.legend }));
  }

  function drawIntegrity() {
    var i = data.integrity;
    var box = el("section", { id: "integrity", cls: "state " + i.state });
    box.appendChild(el("h2", { text: STATE_WORDS[i.state] }));
    box.appendChild(el("p", { text: i.text }));
    box.appendChild(el("pre", { text: i.report }));
    var failures = i.problems.filter(function (p) { return !p.untrusted; });
    if (failures.length) {
      var first = failures[0];
      box.appendChild(el("button", { id: "goto-failure", on: function () {
        view.tab = "timeline";
        view.selected = first.revision === null ? null : first.stream + "@" + first.revision;
        drawSession();
        var node = document.querySelector(".event.failed");
        if (node) node.scrollIntoView({ block: "center" });
      } }, "show the first failure in the timeline"));
    }
    var cps = el("ul", { cls: "checkpoints" });
    data.checkpoints.forEach(function (c) { cps.appendChild(el("li", { text: "@" + c.revision + " " + c.text })); });
    box.appendChild(el("h2", { text: "checkpoints" }));
    box.appendChild(cps);
    app.appendChild(box);
  }

  function drawReplay() {
    var r = data.replay;
    var pick = el("select", { id: "replay-at" });
    pick.appendChild(el("option", { value: "", text: "now (get_items())" }));
    r.indexes.forEach(function (n) {
      var o = el("option", { value: String(n), text: "just before item #" + n });
      if (view.at === n) o.selected = true;
      pick.appendChild(o);
    });
    var list = el("ol", { id: "replay", start: "0" });
    function show(items) {
      list.textContent = "";
      items.forEach(function (item) {
        list.appendChild(el("li", null, el("div", { cls: "said" },
          el("b", { text: speaker(item) }), el("span", { text: " " + said(item) })),
          el("details", null, el("summary", { text: "stored item" }), el("pre", { text: pretty(item) }))));
      });
      if (!items.length) list.appendChild(el("li", { cls: "dim", text: "(no items)" }));
    }
    pick.addEventListener("change", function () {
      view.at = pick.value === "" ? null : Number(pick.value);
      load();
    });
    function load() {
      if (view.at === null) return show(r.current);
      var known = r.histories[String(view.at)];
      if (known) return show(known);
      if (mode !== "live") return show([]);
      fetch("/api/sessions/" + encodeURIComponent(data.session_id) + "/replay?at=" + view.at + lineQuery())
        .then(function (res) { return res.json(); })
        .then(function (body) { r.histories[String(view.at)] = body.items || []; show(r.histories[String(view.at)]); });
    }
    app.appendChild(el("section", { cls: "replay" }, el("label", null, "history ", pick), list));
    load();
  }

  // -- helpers ---------------------------------------------------------------------
  function shortTime(iso) { return iso.slice(5, 16).replace("T", " "); }
  function firstFailure() {
    return data.integrity.problems.filter(function (p) { return !p.untrusted; })[0] || {};
  }
  // Who says an item, and what, in a line: a message's role, or the kind of item.
  function speaker(item) {
    if (item.role) return item.role + (item.type && item.type !== "message" ? " (" + item.type + ")" : "");
    return item.type || "item";
  }
  function said(item) {
    var content = item.content;
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content.map(function (part) { return part.text || part.refusal || "[" + (part.type || "part") + "]"; }).join(" ");
    }
    if (item.type === "function_call") return item.name + "(" + (item.arguments || "") + ")";
    if (item.type === "function_call_output") {
      return "→ " + (typeof item.output === "string" ? item.output : JSON.stringify(item.output));
    }
    return "";
  }

  function draw() {
    if (data.kind === "session") drawSession();
    else drawSessions();
  }

  // -- live ------------------------------------------------------------------------
  function follow() {
    var base = data.kind === "session" ? "/sessions/" + encodeURIComponent(data.session_id) : "";
    var api = data.kind === "session" ? "/api/sessions/" + encodeURIComponent(data.session_id) : "/api/sessions";
    if (data.kind === "session" && data.branch) api += "?branch=" + encodeURIComponent(data.branch.name);
    var busy = false, again = false;
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(api, { credentials: "same-origin" }).then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.json();
      }).then(function (fresh) {
        if (data.kind === "session") fresh.replay.histories = data.replay.histories;
        data = fresh;
        draw();
        setStatus("live · updated " + new Date().toLocaleTimeString(), "live");
      }).catch(function (err) {
        setStatus("update failed: " + err.message, "bad");
      }).then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
    }
    var after = data.position === null || data.position === undefined ? "" : String(data.position);
    var source = new EventSource(base + "/events?after=" + after);
    source.addEventListener("changed", refresh);
    source.onopen = function () { setStatus("live", "live"); };
    source.onerror = function () { setStatus("reconnecting…", "bad"); };
  }

  if (data.kind === "session" && data.replay.at !== null && data.replay.at !== undefined) {
    view.tab = "replay";
    view.at = data.replay.at;
  }
  draw();
  if (mode === "live") follow();
  else if (mode === "file") setStatus("saved copy · no network", "dim");
})();
