// agentjournal viewer: eval scores and runs. Loaded before ui.js, which calls it:
// a badge per score on each turn's user message, a session's scores, the score column
// of the sessions list, the list of eval runs (/evals) and a run's page (/evals/{id}).
// Every stored value is written with textContent, never as markup.
"use strict";
window.agentjournalEvals = (function () {
  var live = document.body.getAttribute("data-mode") === "live";

  function fixed(v) { return v === null || v === undefined ? "-" : Number(v).toFixed(2); }
  function tone(label, score) {
    var l = String(label || "").toLowerCase();
    if (l === "pass" || l === "good" || l === "ok") return "pass";
    if (l === "fail" || l === "bad") return "fail";
    return score >= 0.5 ? "pass" : "fail";
  }
  function runLink(el, run) {
    return live ? el("a", { href: "/evals/" + encodeURIComponent(run), text: run }) : run;
  }

  // The score column of the sessions list: the latest score, then the newest rating.
  function scoreCell(row) {
    var parts = [];
    if (row.score) {
      parts.push(fixed(row.score.score) + " " + row.score.label +
        (row.score.line !== "main" ? " (" + row.score.line + ")" : ""));
    }
    if (row.rating) parts.push("rated " + fixed(row.rating.score));
    return parts.join(" \u00b7 ") || "-";
  }

  // A badge per score of the turn a user message opens (the line's own top stream only).
  function turnBadges(node, e, data, el) {
    var scores = data.scores;
    if (!scores || !e.record || !e.record.metadata) return;
    var top = data.branch ? data.branch.stream : "AgentSession-" + data.session_id;
    var turn = e.record.metadata["aj.turn"];
    if (e.stream !== top || !turn || !scores.turns[turn]) return;
    var box = el("div", { cls: "scores", "data-turn": String(turn) });
    scores.turns[turn].forEach(function (b) {
      var who = b.human ? "rated by " + (b.by || "a person") : b.scorer;
      box.appendChild(el("span", {
        cls: "score-badge " + tone(b.label, b.score) + (b.human ? " human" : ""),
        title: (b.reason || "") + " (run " + b.run + ")",
        "data-run": b.run,
        text: (b.human ? "\u2605 " : "") + fixed(b.score) + (b.label ? " " + b.label : "") + " \u00b7 " + who,
      }));
    });
    node.appendChild(box);
  }

  // The line's session scores, each naming its run, under the page's facts.
  function sessionScores(data, el) {
    var scores = data.scores;
    if (!scores || !scores.runs.length) return null;
    var box = el("section", { cls: "session-scores", id: "session-scores" },
      el("b", { text: "eval scores" }));
    scores.sessions.forEach(function (s) {
      box.appendChild(el("span", { cls: "score-badge " + tone(s.label, s.score), title: s.reason || "",
        text: fixed(s.score) + " " + s.label }));
      box.appendChild(el("span", { cls: "dim" }, " run ", runLink(el, s.run)));
    });
    if (!scores.sessions.length) {
      box.appendChild(el("span", { cls: "dim" }, " scored by ",
        scores.runs.length + (scores.runs.length === 1 ? " run" : " runs")));
    }
    return box;
  }

  function table(el, id, head, rows) {
    var t = el("table", { cls: "evals", id: id });
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", { text: h })); });
    t.appendChild(el("thead", null, tr));
    var body = el("tbody");
    rows.forEach(function (cells) {
      var row = el("tr");
      cells.forEach(function (c) { row.appendChild(el("td", null, c)); });
      body.appendChild(row);
    });
    t.appendChild(body);
    return el("div", { cls: "scroll" }, t);
  }

  function drawRuns(app, data, el) {
    app.appendChild(el("p", null, el("a", { href: "/", text: "\u2190 sessions" })));
    if (!data.runs.length) {
      app.appendChild(el("p", { cls: "dim", id: "no-runs", text: "no eval run has scored a session" }));
      return;
    }
    app.appendChild(table(el, "eval-runs",
      ["run", "kind", "status", "scorers", "sessions", "turns scored", "average", "cost", "started"],
      data.runs.map(function (r) {
        return [runLink(el, r.run_id), r.kind || "-", r.status, r.scorer || "-", String(r.sessions),
          String(r.turns_scored), fixed(r.average),
          r.total_cost === null || r.total_cost === undefined ? "-" : "$" + Number(r.total_cost).toFixed(4),
          r.started_at ? r.started_at.slice(0, 19).replace("T", " ") : "-"];
      })));
  }

  function drawRun(app, data, el) {
    var run = data.run;
    var done = run.completion;
    app.appendChild(el("p", null, el("a", { href: "/evals", text: "\u2190 eval runs" })));
    app.appendChild(el("div", { cls: "facts", id: "run-facts" },
      el("span", { text: "kind " + (run.kind || "-") }),
      el("span", { cls: "state " + (done ? "verified" : "unsigned"), text: run.status }),
      el("span", { text: run.sessions.length + " session lines" }),
      run.criteria ? el("span", { text: "criteria " + run.criteria.slice(0, 19) + "\u2026" }) : null,
      run.started_at ? el("span", { text: "started " + run.started_at.slice(0, 19).replace("T", " ") }) : null,
      run.experiment && live ? el("a", { href: "/experiments/" + encodeURIComponent(run.run_id),
        text: "the experiment's page" }) : null));
    app.appendChild(el("h2", { text: "scorers" }));
    app.appendChild(table(el, "run-scorers", ["scorer", "version", "kind", "model"],
      run.scorers.map(function (s) {
        return [String(s.name || "-"), String(s.version || "-"), String(s.kind || "-"), String(s.model || "-")];
      })));
    data.lines.forEach(function (line) {
      var href = "/sessions/" + encodeURIComponent(line.session) +
        (line.line !== "main" ? "?branch=" + encodeURIComponent(line.line) : "");
      var head = el("h2", { cls: "run-line", "data-session": line.session },
        live ? el("a", { href: href, text: line.session }) : line.session,
        line.line !== "main" ? " (" + line.line + ")" : "",
        line.score === null ? el("span", { cls: "dim", text: " not scored yet" }) :
          el("span", { cls: "score-badge " + tone(line.label, line.score), title: line.reason || "",
            text: fixed(line.score) + " " + line.label }));
      app.appendChild(head);
      app.appendChild(table(el, "", ["turn", "scorer", "score", "label", "reason"],
        line.turns.map(function (t) {
          return [String(t.turn), t.human ? "rated by " + (t.by || "a person") : t.scorer, fixed(t.score),
            t.label || "-", t.reason || ""];
        })));
    });
    if (done) {
      app.appendChild(el("h2", { text: "completed" }));
      var judge = done.judge || {};
      app.appendChild(el("div", { cls: "facts", id: "run-completion" },
        el("span", { text: done.turns_scored + " turns scored" }),
        el("span", { text: "average " + fixed(done.average) }),
        el("span", { text: "judge cost $" + Number(done.total_cost || 0).toFixed(4) }),
        judge.total_tokens ? el("span", { text: judge.total_tokens + " judge tokens" }) : null));
    }
  }

  // The eval pages (data.kind eval_runs, eval_run); false for any other page.
  function draw(app, data, el) {
    if (data.kind !== "eval_runs" && data.kind !== "eval_run") return false;
    app.textContent = "";
    if (data.kind === "eval_runs") drawRuns(app, data, el);
    else drawRun(app, data, el);
    return true;
  }

  if (live) {
    var top = document.querySelector("header.top");
    var status = document.getElementById("status");
    if (top && status) {
      var link = document.createElement("a");
      link.className = "evals-link";
      link.href = "/evals";
      link.textContent = "eval runs";
      top.insertBefore(link, status);
    }
  }

  return { draw: draw, scoreCell: scoreCell, sessionScores: sessionScores, turnBadges: turnBadges };
})();
