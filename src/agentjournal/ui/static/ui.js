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
    ["approvals", "waiting"], ["score", "score"],
    ["first", "first"], ["last", "last"], ["integrity", "integrity"]];
  var TEXT_COLUMNS = { session: 1, app: 1, user: 1, agent: 1 };
  var listing = { seq: 0, timer: null, busy: false, again: false };
  var EV = window.agentjournalEvals;  // evals.js: scores and eval runs

  function listQuery() {
    var q = data.query || {};
    return { q: q.q || "", app: q.app || "", user: q.user || "", agent: q.agent || "",
      state: q.state || "", blocks: q.blocks || "", branches: q.branches || "",
      approvals: q.approvals || "", label: q.label || "",
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
    bar.appendChild(checkbox("approvals", "waiting for approval", query.approvals));
    bar.appendChild(select("label", "latest score", [["", "every score"], ["pass", "pass"],
      ["fail", "fail"], ["-", "never scored"]], query.label));
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
        row.pending_approvals ? row.pending_approvals + " waiting for approval" : "-", EV.scoreCell(row),
        shortTime(row.first_activity), shortTime(row.last_activity), STATE_WORDS[row.integrity.state]];
      var tr = el("tr", { "data-session": row.session_id,
        cls: row.pending_approvals ? "waiting" : "" });
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
  // The page is a console: the conversation (handoffs nested, decisions inline), the
  // waterfall of what took time, the agents' lanes, two lines compared, the integrity
  // report and the replay; the stored record of whatever was clicked stays beside it.
  var session = { tab: "conversation", selected: null, at: null, collapsed: {}, compare: null };
  var TABS = [["conversation", "Conversation"], ["waterfall", "Waterfall"], ["timeline", "Lanes"],
    ["compare", "Compare"], ["integrity", "Integrity"], ["replay", "Replay"]];

  function keyOf(e) { return e.stream + "@" + e.revision; }

  function drawSession() {
    app.textContent = "";
    var h = data.header;
    var integrity = data.integrity;
    var facts = el("div", { cls: "facts" },
      el("span", { text: "app " + (h.app || "-") }), el("span", { text: "user " + (h.user || "-") }),
      el("span", { text: "agent " + (h.agent || "-") }),
      el("span", { text: h.events + " events in " + h.streams + " streams" }),
      h.first ? el("span", { text: shortTime(h.first) + " \u2013 " + shortTime(h.last) + " UTC" }) : null,
      el("span", { id: "ledger", cls: "state " + integrity.state, text: integrity.text }));
    app.appendChild(facts);
    var lines = drawLines();
    if (lines) app.appendChild(lines);
    var waiting = drawApprovals();
    if (waiting) app.appendChild(waiting);
    var scored = EV.sessionScores(data, el);
    if (scored) app.appendChild(scored);
    var tabs = el("nav", { cls: "tabs" });
    TABS.forEach(function (t) {
      if (t[0] === "compare" && !(data.branches || []).length) return;
      tabs.appendChild(el("button", { id: "tab-" + t[0], cls: session.tab === t[0] ? "active" : "",
        on: function () { session.tab = t[0]; drawSession(); } }, t[1]));
    });
    app.appendChild(tabs);
    if (session.tab === "integrity") return drawIntegrity();
    if (session.tab === "replay") return drawReplay();
    if (session.tab === "compare") return drawCompare();
    var main = session.tab === "timeline" ? drawTimeline()
      : session.tab === "waterfall" ? drawWaterfall() : drawConversation();
    var detail = el("section", { cls: "detail", id: "detail" });
    app.appendChild(el("div", { cls: "layout" }, drawTree(), el("div", { cls: "main" }, main), detail));
    drawDetail();
    app.appendChild(el("p", { cls: "dim", text: data.legend }));
  }

  // Selecting redraws only the marks and the detail panel: open blocks and scroll stay.
  function choose(e) {
    session.selected = keyOf(e);
    Array.prototype.forEach.call(document.querySelectorAll(".selected"), function (n) {
      n.classList.remove("selected");
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-key]"), function (n) {
      if (n.getAttribute("data-key") === session.selected) n.classList.add("selected");
    });
    drawDetail();
  }

  function drawDetail() {
    var detail = document.getElementById("detail");
    if (!detail) return;
    detail.textContent = "";
    var chosen = data.events.filter(function (e) { return session.selected === keyOf(e); })[0];
    if (!chosen) {
      detail.appendChild(el("p", { cls: "dim", text: "click an event to see its stored record" }));
      return;
    }
    detail.appendChild(el("h2", { text: chosen.kind + " · " + chosen.stream + "@" + chosen.revision +
      " · position " + chosen.position }));
    if (chosen.failed) detail.appendChild(el("p", { cls: "problem", text: firstFailure().text }));
    detail.appendChild(el("pre", { id: "record", text: pretty(chosen.record) }));
  }

  // The line's pending approvals: who asks to run what, since when; with the viewer's
  // token (data.decide), a name, a reason and approve/reject, which POST the answer
  // (the page's cookie and its own Origin carry the token) and redraw from the answer.
  var answering = { by: "", reason: "", error: "" };
  function drawApprovals() {
    var pending = data.approvals || [];
    if (!pending.length) return null;
    var box = el("section", { cls: "approvals", id: "approvals" },
      el("h2", { text: pending.length + (pending.length === 1 ? " call waits" : " calls wait") +
        " for approval" }));
    var by = null, reason = null;
    if (data.decide && mode === "live") {
      by = el("input", { type: "text", id: "approve-by", placeholder: "your name (recorded)",
        "aria-label": "who decides" });
      by.value = answering.by;
      by.addEventListener("input", function () { answering.by = by.value; });
      reason = el("input", { type: "text", id: "approve-reason", placeholder: "why (optional)",
        "aria-label": "reason" });
      reason.value = answering.reason;
      reason.addEventListener("input", function () { answering.reason = reason.value; });
      box.appendChild(el("div", { cls: "toolbar" }, by, reason));
    }
    var table = el("table", { cls: "approvals-table" }, el("tr", null, el("th", { text: "agent" }),
      el("th", { text: "tool" }), el("th", { text: "arguments" }), el("th", { text: "asked at" }),
      el("th", { text: "" })));
    pending.forEach(function (a) {
      var actions = el("td", { cls: "actions" });
      if (by) {
        ["approve", "reject"].forEach(function (what) {
          actions.appendChild(el("button", { type: "button", cls: "answer-" + what,
            "data-request": a.request_id, text: what, on: function () {
              answer(a.request_id, what === "approve", by.value, reason.value);
            } }));
        });
      }
      table.appendChild(el("tr", { "data-request": a.request_id }, el("td", { text: a.agent }),
        el("td", { text: a.tool }), el("td", null, el("code", { text: a.arguments })),
        el("td", { text: shortTime(a.asked_at) + " UTC" }), actions));
    });
    box.appendChild(table);
    box.appendChild(el("p", { cls: "bad", id: "approve-error", text: answering.error }));
    return box;
  }
  function answer(request, approve, by, reason) {
    if (!by.trim()) {
      answering.error = "give your name: it is recorded with the answer";
      document.getElementById("approve-error").textContent = answering.error;
      return;
    }
    var url = "/api/sessions/" + encodeURIComponent(data.session_id) + "/approvals/" +
      encodeURIComponent(request) + (data.branch ? "?branch=" + encodeURIComponent(data.branch.name) : "");
    fetch(url, { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ approve: approve, by: by, reason: reason }) })
      .then(function (res) {
        return res.text().then(function (text) {
          if (res.ok) return JSON.parse(text);
          var said = text;
          try { said = JSON.parse(text).error || text; } catch (ignored) { /* plain text */ }
          throw new Error(said.trim());
        });
      }).then(function (done) {
        answering.error = "";
        answering.reason = "";
        setStatus(done.outcome + " by " + done.by, "live");
        data.approvals = (data.approvals || []).filter(function (a) { return a.request_id !== request; });
        drawSession();
      }).catch(function (err) {
        answering.error = err.message;
        var shown = document.getElementById("approve-error");
        if (shown) shown.textContent = err.message;
      });
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

  function usageTable(id, title, report) {
    var table = el("table", { cls: "usage", id: id }, el("tr", null, el("th", { text: title }),
      el("th", { text: "req" }), el("th", { text: "tokens" }), el("th", { text: "USD" })));
    report.rows.concat([report.total]).forEach(function (r) {
      table.appendChild(el("tr", null, el("td", { text: r.key || (r === report.total ? "total" : "(unnamed)") }),
        el("td", { text: String(r.requests) }), el("td", { text: String(r.total_tokens) }),
        el("td", { text: money(r.cost_usd) })));
    });
    return table;
  }

  function drawTree() {
    var list = el("ul", { cls: "tree", id: "tree" });
    data.tree.forEach(function (s) {
      list.appendChild(el("li", { style: "padding-left:" + (s.depth * 1.2) + "em", "data-stream": s.stream,
        title: s.stream }, el("b", { text: s.agent }), el("span", { cls: "dim", text: " · " + s.events + " events" })));
    });
    var side = el("aside", { cls: "side" }, el("h2", { text: "handoff tree" }), list);
    if (data.usage) {
      side.appendChild(el("h2", { text: "usage and cost" }));
      side.appendChild(usageTable("usage", "agent", data.usage.agent));
      side.appendChild(usageTable("usage-model", "model", data.usage.model));
    }
    return side;
  }

  // -- the conversation
  function drawConversation() {
    var box = el("div", { cls: "conversation", id: "conversation" });
    data.conversation.forEach(function (n) { box.appendChild(convNode(n)); });
    if (!data.conversation.length) box.appendChild(el("p", { cls: "dim", text: "(nothing on this line yet)" }));
    return box;
  }

  function marks(e, cls) {
    cls += " kind-" + e.kind.replace(/[^A-Za-z]/g, "");
    if (e.decision) cls += " decision-" + e.decision.replace(/[^A-Za-z]/g, "");
    if (e.failed) cls += " failed";
    if (session.selected === keyOf(e)) cls += " selected";
    return cls;
  }

  function clickable(node, e) {
    node.setAttribute("data-key", keyOf(e));
    node.setAttribute("data-stream", e.stream);
    node.setAttribute("data-revision", String(e.revision));
    node.setAttribute("data-agent", e.agent);
    node.addEventListener("click", function (ev) { ev.stopPropagation(); ev.preventDefault(); choose(e); });
    return node;
  }

  function convNode(n) {
    if (n.block) return convBlock(n.block);
    var e = data.events[n.event];
    var node = bubble(e);
    n.checks.forEach(function (j) { node.appendChild(check(data.events[j])); });
    return node;
  }

  function diffOf(e) {
    var diff = el("pre", { cls: "diff" });
    e.diff.forEach(function (d) {
      diff.appendChild(el("span", { cls: d[0] === "+" ? "add" : d[0] === "-" ? "del" : "same", text: d[0] + " " + d[1] + "\n" }));
    });
    return diff;
  }

  // How long an event's own work took, from the waterfall (null when not recorded).
  var tookOf = { of: null, ms: {} };
  function took_(e) {
    if (tookOf.of !== data) {
      tookOf = { of: data, ms: {} };
      data.waterfall.bars.forEach(function (b) {
        if (b.event !== null && b.kind !== "run") tookOf.ms[keyOf(data.events[b.event])] = b.to - b.from;
      });
    }
    var ms = tookOf.ms[keyOf(e)];
    return ms === undefined ? null : ms;
  }

  function check(e) {
    var took = took_(e);
    var line = clickable(el("div", { cls: marks(e, "verdict") },
      el("span", { cls: "badge", text: e.decision || e.kind }),
      el("span", { text: " " + e.text + (took === null ? "" : " \u00b7 " + duration(took)) })), e);
    if (e.diff) line.appendChild(diffOf(e));
    return line;
  }

  function bubble(e) {
    var s = e.said;
    if (s) {
      var who = s.role === "user" ? "user" : e.agent + (s.role === "call" ? " calls" :
        s.role === "result" ? " \u2190 result" : s.role === "thinking" ? " thinks" : "");
      var node = el("div", { cls: marks(e, "msg role-" + s.role) },
        el("div", { cls: "who" }, el("b", { text: who }), el("span", { cls: "where", text: e.index !== null ? "#" + e.index : "" })));
      if (s.role === "call") {
        s.calls.forEach(function (c) {
          node.appendChild(el("pre", { cls: "call", text: c.name + "(" + c.arguments + ")" }));
        });
      } else if (s.role === "result" && s.text.length > 600) {
        node.appendChild(el("details", null, el("summary", { text: s.text.slice(0, 200) + "\u2026" }),
          el("pre", { text: s.text })));
      } else {
        node.appendChild(el(s.role === "result" ? "pre" : "div", { cls: "said", text: s.text }));
      }
      if (s.role === "user") EV.turnBadges(node, e, data, el);
      if (e.failed) node.appendChild(el("div", { cls: "problem", text: firstFailure().message }));
      return clickable(node, e);
    }
    if (e.kind === "GuardrailDecided" || e.kind === "AuthorityRefused" ||
      e.kind === "InterruptIssued" || e.kind === "InterruptResolved") return check(e);
    var took = took_(e);
    var line = el("div", { cls: marks(e, "note") }, el("span", { cls: "kind", text: e.kind }),
      el("span", { text: " " + e.text + (took === null ? "" : " \u00b7 " + duration(took)) }));
    if (e.failed) line.appendChild(el("div", { cls: "problem", text: firstFailure().message }));
    return clickable(line, e);
  }

  function convBlock(b) {
    var opened = data.events[b.open];
    var closed = b.close === null ? null : data.events[b.close];
    var outcome = b.outcome || (b.close === null ? "open" : "");
    var fold = el("span", { cls: "fold", title: "fold or unfold what " + b.agent + " did" });
    var head = el("summary", null, fold,
      clickable(el("span", { cls: marks(opened, "handoff-head") },
        el("b", { text: (b.continued ? "\u21bb " : "\u2192 ") + b.agent }),
        el("span", { cls: "dim", text: b.continued ? " continued on this line" : " handed off by " + opened.agent })), opened),
      el("span", { cls: "badge outcome-" + outcome.replace(/[^A-Za-z]/g, ""), text: outcome }));
    var box = el("details", { cls: "handoff", "data-block": b.stream }, head);
    if (!session.collapsed[b.stream]) box.setAttribute("open", "");
    box.addEventListener("toggle", function () { session.collapsed[b.stream] = !box.open; });
    fold.addEventListener("click", function (ev) { ev.preventDefault(); ev.stopPropagation(); box.open = !box.open; });
    b.checks.forEach(function (j) { box.appendChild(check(data.events[j])); });
    b.nodes.forEach(function (n) { box.appendChild(convNode(n)); });
    if (closed) box.appendChild(bubble(closed));
    return box;
  }

  // -- the waterfall
  function drawWaterfall() {
    var w = data.waterfall;
    var box = el("div", { cls: "waterfall", id: "waterfall" });
    if (!w.bars.length) {
      box.appendChild(el("p", { cls: "dim", text: "no recorded times on this line" }));
      return box;
    }
    var total = Math.max.apply(null, w.bars.map(function (b) { return b.to; })) || 1;
    box.appendChild(el("div", { cls: "bar-row axis" }, el("span", { cls: "bar-label", text: "from " + shortTime(w.start) + " UTC" }),
      el("span", { cls: "track" }, el("span", { cls: "tick", text: "0" }),
        el("span", { cls: "tick end", text: duration(total) }))));
    w.bars.forEach(function (b) {
      var left = 100 * b.from / total;
      var width = Math.max(100 * (b.to - b.from) / total, 0.4);
      var e = b.event === null ? null : data.events[b.event];
      var bar = el("span", { cls: "bar kind-" + b.kind + (e && e.decision ? " decision-" + e.decision.replace(/[^A-Za-z]/g, "") : ""),
        style: "left:" + left.toFixed(3) + "%;width:" + Math.min(width, 100 - left).toFixed(3) + "%" });
      var row = el("div", { cls: "bar-row row-" + b.kind },
        el("span", { cls: "bar-label", title: b.label },
          el("span", { cls: "bar-kind", text: b.kind }), el("span", { text: " " + (b.agent ? b.agent + " \u00b7 " : "") + b.label })),
        el("span", { cls: "track" }, bar), el("span", { cls: "bar-ms", text: duration(b.to - b.from) }));
      if (e) {
        if (session.selected === keyOf(e)) row.classList.add("selected");
        clickable(row, e);
      }
      box.appendChild(row);
    });
    return box;
  }

  // -- the lanes
  function drawTimeline() {
    var lanes = data.lanes;
    var grid = el("div", { cls: "timeline", id: "timeline",
      style: "grid-template-columns: repeat(" + Math.max(lanes.length, 1) + ", minmax(11em, 1fr))" });
    lanes.forEach(function (name, i) {
      grid.appendChild(el("div", { cls: "lane-head", "data-lane": name, style: "grid-column:" + (i + 1) }, name));
    });
    data.events.forEach(function (e, row) {
      var card = el("div", { cls: marks(e, "event"), style: "grid-column:" + (e.lane + 1) + ";grid-row:" + (row + 2) },
        el("div", { cls: "kind" }, el("span", { text: e.kind }),
          e.decision ? el("span", { cls: "badge", text: e.decision }) : null,
          el("span", { cls: "where", text: e.where })),
        el("div", { cls: "text", text: e.text }));
      if (e.failed) card.appendChild(el("div", { cls: "problem", text: firstFailure().message }));
      if (e.diff) card.appendChild(diffOf(e));
      grid.appendChild(clickable(card, e));
    });
    return grid;
  }

  // -- two lines compared
  function drawCompare() {
    var names = ["main"].concat((data.branches || []).map(function (b) { return b.name; }));
    var c = session.compare || data.compare;
    var a = c ? c.a.name : (data.branch ? data.branch.parent : "main");
    var b = c ? c.b.name : (data.branch ? data.branch.name : names[1]);
    function picker(id, value) {
      var pick = el("select", { id: id });
      names.forEach(function (n) { pick.appendChild(el("option", { value: n, text: n })); });
      pick.value = value;
      if (mode !== "live") pick.disabled = true;
      pick.addEventListener("change", function () { load(pickA.value, pickB.value); });
      return pick;
    }
    var pickA = picker("compare-a", a), pickB = picker("compare-b", b);
    var out = el("div", { id: "compare" });
    app.appendChild(el("section", { cls: "compare" }, el("div", { cls: "toolbar" },
      el("label", null, "line ", pickA), el("label", null, " beside ", pickB)), out));
    function show(found) {
      out.textContent = "";
      if (!found) {
        out.appendChild(el("p", { cls: "dim", text: mode === "live" ? "loading\u2026" :
          "a saved copy compares its line with its parent only" }));
        return;
      }
      out.appendChild(el("p", { id: "compare-shared", text: "both lines share their first " + found.shared +
        " items; after them:" }));
      var keys = [["requests", "model requests"], ["tokens", "tokens"], ["cost_usd", "cost (USD)"],
        ["tool_calls", "tool calls"], ["blocks", "guardrail blocks"], ["refusals", "authority refusals"]];
      var table = el("table", { cls: "compare-summary", id: "compare-summary" },
        el("tr", null, el("th", { text: "" }), el("th", { text: found.a.name }), el("th", { text: found.b.name })));
      keys.forEach(function (k) {
        var left = found.a.summary[k[0]], right = found.b.summary[k[0]];
        var show = function (v) { return k[0] === "cost_usd" ? money(v) : Array.isArray(v) ? (v.join(", ") || "-") : String(v); };
        var tr = el("tr", { cls: show(left) === show(right) ? "" : "differs" }, el("th", { text: k[1] }),
          el("td", { text: show(left) }), el("td", { text: show(right) }));
        table.appendChild(tr);
      });
      table.appendChild(el("tr", { cls: found.a.summary.answer === found.b.summary.answer ? "" : "differs" },
        el("th", { text: "final answer" }), el("td", { cls: "answer", text: found.a.summary.answer || "-" }),
        el("td", { cls: "answer", text: found.b.summary.answer || "-" })));
      out.appendChild(table);
      if (found.scores) out.appendChild(drawLineScores(found));
      var cols = el("div", { cls: "columns" });
      [found.a, found.b].forEach(function (side) {
        var list = el("ol", { cls: "items", start: String(found.shared) });
        side.items.forEach(function (item) {
          list.appendChild(el("li", null, el("div", { cls: "said" }, el("b", { text: speaker(item) }),
            el("span", { text: " " + said(item) }))));
        });
        if (!side.items.length) list.appendChild(el("li", { cls: "dim", text: "(no items after the shared ones)" }));
        cols.appendChild(el("div", { cls: "column", "data-line": side.name },
          el("h2", { text: side.where + (side.deleted ? " [" + side.deleted + "]" : "") }), list));
      });
      out.appendChild(cols);
    }
    function load(x, y) {
      if (x === y) { out.textContent = ""; out.appendChild(el("p", { cls: "dim", text: "pick two different lines" })); return; }
      if (data.compare && data.compare.a.name === x && data.compare.b.name === y) return show(data.compare);
      if (mode !== "live") return show(null);
      show(null);
      fetch("/api/sessions/" + encodeURIComponent(data.session_id) + "/compare?a=" + encodeURIComponent(x) +
        "&b=" + encodeURIComponent(y), { credentials: "same-origin" })
        .then(function (res) { return res.json(); })
        .then(function (body) {
          if (body.error) { out.textContent = ""; out.appendChild(el("p", { cls: "bad", text: body.error })); return; }
          session.compare = body;
          show(body);
        });
    }
    if (c && c.a.name === a && c.b.name === b) show(c);
    else load(a, b);
  }

  // -- experiments: both lines' scores (an eval run of kind "experiment")
  function score(v) { return v === null || v === undefined ? "-" : Number(v).toFixed(2); }
  function drawLineScores(found) {
    var s = found.scores, a = s.lines[found.a.name], b = s.lines[found.b.name];
    var box = el("section", { cls: "experiment-scores", id: "compare-scores" },
      el("h2", null, "scores of experiment ",
        el("a", { href: "/experiments/" + encodeURIComponent(s.run_id), text: s.run_id }),
        " (candidate " + s.candidate + ", from turn " + s.at_turn + ")"));
    var table = el("table", { cls: "compare-summary" },
      el("tr", null, el("th", { text: "" }), el("th", { text: found.a.name }), el("th", { text: found.b.name })));
    function row(label, x, y) {
      table.appendChild(el("tr", { cls: score(x) === score(y) ? "" : "differs" }, el("th", { text: label }),
        el("td", { text: score(x) }), el("td", { text: score(y) })));
    }
    row("session score", a.score, b.score);
    var scorers = {};
    Object.keys(a.by_scorer).concat(Object.keys(b.by_scorer)).forEach(function (k) { scorers[k] = 1; });
    Object.keys(scorers).sort().forEach(function (k) { row("  " + k, a.by_scorer[k], b.by_scorer[k]); });
    var turns = {};
    Object.keys(a.turns).concat(Object.keys(b.turns)).forEach(function (t) { turns[t] = 1; });
    Object.keys(turns).sort(function (x, y) { return x - y; }).forEach(function (t) {
      var names = {};
      Object.keys(a.turns[t] || {}).concat(Object.keys(b.turns[t] || {})).forEach(function (k) { names[k] = 1; });
      Object.keys(names).sort().forEach(function (k) {
        row("turn " + t + " · " + k, (a.turns[t] || {})[k], (b.turns[t] || {})[k]);
      });
    });
    box.appendChild(table);
    return box;
  }

  function drawExperiment() {
    app.textContent = "";
    app.appendChild(el("div", { cls: "facts" },
      el("span", { text: "candidate " + (data.candidate || "-") }),
      el("span", { text: "from turn " + data.at_turn }),
      el("span", { text: "branch " + data.branch }),
      el("span", { text: data.sessions.length + " sessions" }),
      el("span", { text: "scorers " + data.scorers.map(function (s) { return s.name; }).join(", ") }),
      el("span", { cls: data.complete ? "state verified" : "state unsigned",
        text: data.complete ? "scored" : "not finished" })));
    var table = el("table", { id: "experiment-sessions", cls: "compare-summary" },
      el("tr", null, el("th", { text: "session" }), el("th", { text: "main" }),
        el("th", { text: "candidate" }), el("th", { text: "\u0394" }), el("th", { text: "turns that changed" }),
        el("th", { text: "" })));
    data.sessions.forEach(function (r) {
      var delta = r.delta === null || r.delta === undefined || Math.abs(r.delta) < 1e-9 ? "" :
        (r.delta > 0 ? "+" : "") + r.delta.toFixed(2);
      table.appendChild(el("tr", { cls: r.changed_turns.length ? "differs" : "", "data-session": r.session },
        el("td", null, el("a", { href: "/sessions/" + encodeURIComponent(r.session), text: r.session })),
        el("td", { text: score(r.main.score) }), el("td", { text: score(r.candidate.score) }),
        el("td", { cls: r.delta > 0 ? "better" : r.delta < 0 ? "worse" : "", text: delta }),
        el("td", { text: r.changed_turns.join(", ") || "-" }),
        el("td", null, el("a", { cls: "compare-link", href: r.compare, text: "compare" }))));
    });
    var lines = data.by_line || {};
    table.appendChild(el("tr", { cls: "total" }, el("th", { text: "all sessions" }),
      el("th", { text: score(lines.main) }), el("th", { text: score(lines[data.branch]) }),
      el("th", { text: "" }), el("th", { text: "" }), el("th", { text: "" })));
    app.appendChild(el("section", { cls: "experiment" }, table));
  }

  function drawIntegrity() {
    var i = data.integrity;
    var box = el("section", { id: "integrity", cls: "state " + i.state });
    box.appendChild(el("h2", { text: STATE_WORDS[i.state] }));
    box.appendChild(el("p", { text: i.text }));
    box.appendChild(el("p", { cls: "dim", text: "checked " + i.checked_at.slice(0, 19).replace("T", " ") + " UTC" }));
    box.appendChild(el("pre", { text: i.report }));
    var failures = i.problems.filter(function (p) { return !p.untrusted; });
    if (failures.length) {
      var first = failures[0];
      box.appendChild(el("button", { id: "goto-failure", on: function () {
        session.tab = "timeline";
        session.selected = first.revision === null ? null : first.stream + "@" + first.revision;
        drawSession();
        var node = document.querySelector(".event.failed");
        if (node) node.scrollIntoView({ block: "center" });
      } }, "show the first failure in the lanes"));
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
      if (session.at === n) o.selected = true;
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
      session.at = pick.value === "" ? null : Number(pick.value);
      load();
    });
    function load() {
      if (session.at === null) return show(r.current);
      var known = r.histories[String(session.at)];
      if (known) return show(known);
      if (mode !== "live") return show([]);
      fetch("/api/sessions/" + encodeURIComponent(data.session_id) + "/replay?at=" + session.at + lineQuery())
        .then(function (res) { return res.json(); })
        .then(function (body) { r.histories[String(session.at)] = body.items || []; show(r.histories[String(session.at)]); });
    }
    app.appendChild(el("section", { cls: "replay" }, el("label", null, "history ", pick), list));
    load();
  }

  // -- helpers ---------------------------------------------------------------------
  function shortTime(iso) { return iso.slice(5, 16).replace("T", " "); }
  function money(usd) {
    if (usd === null || usd === undefined) return "unknown";
    return usd > 0 && usd < 0.01 ? usd.toPrecision(2) : usd.toFixed(2);
  }
  function duration(ms) {
    return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms >= 10 ? ms.toFixed(0) + " ms" : ms.toFixed(1) + " ms";
  }
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
    if (EV.draw(app, data, el)) return;
    if (data.kind === "session") drawSession();
    else if (data.kind === "experiment") drawExperiment();
    else drawSessions();
  }

  // -- live ------------------------------------------------------------------------
  function follow() {
    if (data.kind !== "session" && data.kind !== "sessions") return;  // an eval page stays
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
    session.tab = "replay";
    session.at = data.replay.at;
  }
  if (data.kind === "session" && /[?&]tab=compare(&|$)/.test(window.location.search) &&
      (data.branches || []).length) {
    session.tab = "compare";  // an experiment's page links here
  }
  draw();
  if (mode === "live" && data.kind !== "experiment") follow();
  else if (mode === "file") setStatus("saved copy · no network", "dim");
})();
