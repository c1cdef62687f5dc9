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
  // The server filters, searches, sorts and pages (GET /api/sessions with the query);
  // the page keeps the query, shows it in the address (shareable) and asks again on
  // every change, and on every live update for the page it shows.
  var COLUMNS = [["session", "session"], ["app", "app"], ["user", "user"], ["agent", "agent"],
    ["items", "items"], ["subagents", "subagents o/c/f"], ["blocks", "blocks"],
    ["refusals", "refusals"], ["tokens", "tokens"], ["branches", "branches"],
    ["first", "first"], ["last", "last"], ["integrity", "integrity"]];
  var TEXT_COLUMNS = { session: 1, app: 1, user: 1, agent: 1 };
  var listing = { seq: 0, timer: null, busy: false, again: false };

  function listQuery() {
    var q = data.query || {};
    return { q: q.q || "", app: q.app || "", user: q.user || "", agent: q.agent || "",
      state: q.state || "", blocks: q.blocks || "", branches: q.branches || "",
      since: q.since || "", until: q.until || "", sort: q.sort || "last",
      order: q.order || (q.sort && TEXT_COLUMNS[q.sort] ? "asc" : "desc"),
      offset: Number(data.offset || 0), limit: Number(data.limit || 50) };
  }
  function listParams(query) {
    var params = new URLSearchParams();
    Object.keys(query).forEach(function (name) {
      var value = query[name];
      if (value === "" || value === null || value === undefined) return;
      if (name === "sort" && value === "last" && query.order === "desc") return;
      if (name === "order" && value === "desc" && query.sort === "last") return;
      if (name === "offset" && !value) return;
      if (name === "limit" && value === 50) return;
      params.set(name, String(value));
    });
    return params.toString();
  }
  function loadList(query) {
    query = query || view.query;
    view.query = query;
    var seq = ++listing.seq;
    var params = listParams(query);
    if (mode === "live") history.replaceState(null, "", "/" + (params ? "?" + params : ""));
    return fetch("/api/sessions" + (params ? "?" + params : ""), { credentials: "same-origin" })
      .then(function (res) {
        return res.json().then(function (body) {
          if (!res.ok) throw new Error(body.error || "HTTP " + res.status);
          return body;
        });
      }).then(function (fresh) {
        if (seq !== listing.seq) return;  // a newer query was sent meanwhile
        data = fresh;
        drawSessions();
        setStatus("live · updated " + new Date().toLocaleTimeString(), "live");
      }).catch(function (err) {
        if (seq !== listing.seq) return;
        setStatus("update failed: " + err.message, "bad");
      });
  }
  // A live update: one request at a time, and at most one a second while the store is
  // busy (a page of a large store costs the server tens of milliseconds).
  function liveList() {
    if (listing.busy) { listing.again = true; return; }
    listing.busy = true;
    loadList().then(function () {
      setTimeout(function () {
        listing.busy = false;
        if (listing.again) { listing.again = false; liveList(); }
      }, 1000);
    });
  }
  function changeQuery(change) {
    var query = Object.assign({}, view.query, change);
    if (!("offset" in change)) query.offset = 0;  // a new filter or order starts at its first page
    loadList(query);
  }
  // Controls are named f-NAME: the page's own elements hold ids like "app" already.
  function select(id, label, options, value) {
    var node = el("select", { id: "f-" + id, "aria-label": label });
    options.forEach(function (o) { node.appendChild(el("option", { value: o[0], text: o[1] })); });
    node.value = value;
    node.addEventListener("change", function () {
      var change = {};
      change[id] = node.value;
      changeQuery(change);
    });
    return node;
  }
  function checkbox(id, label, value) {
    var box = el("input", { type: "checkbox", id: "f-" + id });
    box.checked = value === "1";
    box.addEventListener("change", function () {
      var change = {};
      change[id] = box.checked ? "1" : "";
      changeQuery(change);
    });
    return el("label", { cls: "check" }, box, " " + label);
  }
  function drawToolbar() {
    var query = view.query;
    var bar = el("div", { cls: "toolbar", id: "toolbar" });
    var search = el("input", { type: "search", id: "q", value: query.q,
      placeholder: "search: words in messages, tools, ids, apps, users, agents" });
    search.value = query.q;
    search.addEventListener("input", function () {
      clearTimeout(listing.timer);
      listing.timer = setTimeout(function () { changeQuery({ q: search.value }); }, 250);
    });
    bar.appendChild(search);
    var choices = data.choices || {};
    function named(list, current, any) {
      var out = [["", any]];
      (list || []).forEach(function (v) { out.push([v, v]); });
      if (current && (list || []).indexOf(current) < 0) out.push([current, current]);
      return out;
    }
    bar.appendChild(select("app", "app", named(choices.app, query.app, "every app"), query.app));
    bar.appendChild(select("agent", "agent", named(choices.agent, query.agent, "every agent"), query.agent));
    var user = el("input", { type: "text", id: "f-user", placeholder: "user id", "aria-label": "user" });
    user.value = query.user;
    user.addEventListener("change", function () { changeQuery({ user: user.value.trim() }); });
    bar.appendChild(user);
    bar.appendChild(select("state", "integrity", [["", "every state"], ["verified", "verified"],
      ["untrusted", "untrusted key"], ["unsigned", "unsigned"], ["failed", "FAILED"]], query.state));
    bar.appendChild(checkbox("blocks", "blocks or refusals", query.blocks));
    bar.appendChild(checkbox("branches", "with branches", query.branches));
    var controls = bar.querySelectorAll("input, select");
    if (mode !== "live") controls.forEach(function (c) { c.disabled = true; });
    return bar;
  }
  function drawPager() {
    var total = data.total || 0, offset = data.offset || 0, limit = data.limit || 50;
    var shown = data.rows.length;
    var range = total ? (offset + (shown ? 1 : 0)).toLocaleString("en") + "\u2013" +
      (offset + shown).toLocaleString("en") + " of " + total.toLocaleString("en") : "0 of 0";
    if (total !== data.sessions) range += " (" + (data.sessions || 0).toLocaleString("en") + " in all)";
    var prev = el("button", { id: "prev", type: "button", text: "\u2190 prev",
      on: function () { changeQuery({ offset: Math.max(0, offset - limit) }); } });
    var next = el("button", { id: "next", type: "button", text: "next \u2192",
      on: function () { changeQuery({ offset: offset + limit }); } });
    prev.disabled = mode !== "live" || offset <= 0;
    next.disabled = mode !== "live" || offset + shown >= total;
    return el("div", { cls: "pager", id: "pager" }, prev, el("span", { id: "range", text: range }), next);
  }
  function drawHead() {
    var head = el("tr", { id: "head" });
    var query = view.query;
    COLUMNS.forEach(function (c) {
      var active = query.sort === c[0];
      var th = el("th", { "data-sort": c[0], cls: active ? "sorted" : "",
        title: "sort by " + c[1] }, c[1], active ? (query.order === "asc" ? " \u25b2" : " \u25bc") : null);
      if (active) th.setAttribute("aria-sort", query.order === "asc" ? "ascending" : "descending");
      if (mode === "live") {
        th.addEventListener("click", function () {
          var order = active ? (query.order === "asc" ? "desc" : "asc") : (TEXT_COLUMNS[c[0]] ? "asc" : "desc");
          changeQuery({ sort: c[0], order: order });
        });
      }
      head.appendChild(th);
    });
    return head;
  }
  function drawSessions() {
    // A redraw replaces the rows, the header and the pager only: the search box keeps
    // its text, focus and caret while the user types.
    var body = document.getElementById("rows");
    if (!view.query) view.query = listQuery();
    if (!body) {
      app.textContent = "";
      app.appendChild(drawToolbar());
      app.appendChild(el("p", { cls: "warning", id: "warning" }));
      body = el("tbody", { id: "rows" });
      app.appendChild(el("div", { cls: "scroll" },
        el("table", { cls: "sessions" }, el("thead", { id: "thead" }), body)));
      app.appendChild(el("div", { id: "pager-slot" }));
    }
    document.getElementById("warning").textContent = data.warning || "";
    var thead = document.getElementById("thead");
    thead.textContent = "";
    thead.appendChild(drawHead());
    var slot = document.getElementById("pager-slot");
    slot.textContent = "";
    slot.appendChild(drawPager());
    drawRows(body);
  }
  function drawRows(body) {
    body.textContent = "";
    data.rows.forEach(function (row) {
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
    if (!data.rows.length) {
      body.appendChild(el("tr", null, el("td", { colspan: String(COLUMNS.length),
        text: data.sessions ? "no sessions match" : "no sessions" })));
    }
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
      if (data.kind === "sessions") { liveList(); return; }  // the page it shows, as asked
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
