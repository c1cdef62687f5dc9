"""The delegation stage: each line's authority log replayed in order, every grant recomputed
from its policy, or without a log each handoff grant narrower than its sender's
(:func:`check_authority`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentjournal import events
from agentjournal._text import plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Policies, Tree, agent_of, authority_at, metadata_int
from agentjournal.authority import Authority, Policy, meet
from agentjournal.errors import InvalidInput
from agentjournal.records import Record


def _cause_of(grant: Record) -> str | None:
    """``run`` or ``handoff`` for a grant event; None for anything else."""
    if grant.type == events.SUBAGENT_STARTED:
        return "handoff" if events.INDEX_KEY in grant.metadata else None
    if grant.type == events.AUTHORITY_GRANTED:
        cause = (grant.body or {}).get("cause")
        return cause if cause in ("run", "handoff") else None
    return None


def check_authority(report: Report, tree: Tree, anchor: Policy | None) -> None:
    """Every grant recomputed from its line's authority log (the package docs say how).

    Main's log is the session's; a branch's is the log it inherits at its fork — the line
    whose log ``BranchStarted.authority`` names, replayed up to that entry (itself after
    what *it* inherited, and so on down the lines) — followed by the branch's own
    ``AgentAuthority-{id}@{key}``. Each grant is checked on its own line only (the streams
    of a line: :meth:`Tree.line_streams`), so a grant on the parent after the fork never
    widens the branch, and the branch's log may name only the branch's grants."""
    grants = [
        event
        for _, event in tree.noted  # every stream's events of the types it holds, in order
        if event.type == events.AUTHORITY_GRANTED
        or (
            event.type == events.SUBAGENT_STARTED
            and events.INDEX_KEY in event.metadata
            and tree.authority(event) is not None
        )
    ]
    lines = _LineLogs(report, tree, anchor)
    if not lines.any_entry():
        if anchor is not None and grants:
            report.fail("delegation", tree.session_stream, None, "grants without a recorded policy")
        _check_narrowing(report, tree, grants)
        return
    by_line: dict[str, list[Record]] = {}
    for grant in grants:
        by_line.setdefault(lines.line_of(grant.stream), []).append(grant)
    unlogged: list[Record] = []
    replays: list[tuple[str, _LogReplay]] = []
    for top in (tree.session_stream, *tree.started):
        replay = lines.replay(top)
        if replay is None:  # no log of its own and none inherited: nothing to recompute from
            unlogged.extend(by_line.get(top, ()))
            continue
        replays.append((top, replay))
        for grant in by_line.get(top, ()):
            if grant.id not in replay.logged:
                report.fail(
                    "delegation",
                    grant.stream,
                    grant.revision,
                    "a grant the authority log does not hold",
                )
    if unlogged:
        if anchor is not None:
            first = unlogged[0]
            report.fail(
                "delegation", first.stream, first.revision, "grants without a recorded policy"
            )
        _check_narrowing(report, tree, unlogged, summary=False)
    if not report.failed("delegation"):
        digests = ", ".join(sorted(tree.policies.by_digest))
        report.lines.append(
            f"delegation: {plural(len(tree.policies.by_digest), 'policy')} recorded"
            + (" (the one given)" if anchor is not None else f" ({digests})")
            + f"; {plural(len(grants), 'grant')}, each recomputed from its policy"
            + (f" on its line's log ({len(replays)} lines)" if len(replays) > 1 else "")
        )
        for top, replay in replays:
            started = tree.started.get(top, (None, None))[1]
            where = "" if started is None else f" on branch {started.branch!r}"
            for agent, reason in replay.resets:
                report.lines.append(
                    f"  reset{where}: {agent} may start from its policy entry again: {reason}"
                )


class _LineLogs:
    """Each line's authority log replayed once, a branch's from the state its parent's
    replay had at the entry the fork binds."""

    def __init__(self, report: Report, tree: Tree, anchor: Policy | None) -> None:
        self.report, self.tree, self.anchor = report, tree, anchor
        self.logs = tree.line_logs()  # top -> its own log
        self.owners = {log: top for top, log in self.logs.items()}  # log -> its line's top
        self.owner = tree.line_streams()  # stream -> its line's top
        # The places forks inherit (log -> revisions): the replay keeps its state there.
        self.wanted: dict[str, set[int]] = {}
        for _, started in tree.started.values():
            if started is not None and started.authority is not None:
                place = started.authority
                self.wanted.setdefault(place.stream, set()).add(place.revision)
        self.states: dict[tuple[str, int], _LogReplay] = {}
        self.done: dict[str, _LogReplay | None] = {}
        self.active: set[str] = set()

    def any_entry(self) -> bool:
        """Whether any line's log has an entry (else no policy was ever in force)."""
        return any(self.tree.streams.get(log) for log in self.logs.values())

    def line_of(self, stream: str) -> str:
        """The top stream of the line ``stream`` is on (main's when it is on none)."""
        return self.owner.get(stream, self.tree.session_stream)

    def replay(self, top: str) -> _LogReplay | None:
        """The line's log replayed (None: the line has no log, own or inherited)."""
        if top in self.done:
            return self.done[top]
        if top in self.active:
            return None  # forks inheriting from each other in a ring: reported below
        self.active.add(top)
        tree = self.tree
        started = tree.started.get(top, (None, None))[1]
        log = self.logs.get(top)
        replay: _LogReplay | None = None
        if started is not None and log is not None and started.authority is not None:
            place = started.authority
            source = self.owners.get(place.stream)
            if source is not None:
                self.replay(source)
            inherited = self.states.get((place.stream, place.revision))
            replay = _LogReplay(self.report, tree, self.anchor, top, self.owner)
            if inherited is None:
                self.report.fail(
                    "delegation",
                    top,
                    0,
                    f"the authority log it inherits ({place.stream}@{place.revision}) is not "
                    "a line's log replayed there",
                )
            else:
                replay.inherit(inherited, started.next_index)
        entries = tree.streams.get(log, []) if log is not None else []
        if entries and replay is None:
            replay = _LogReplay(self.report, tree, self.anchor, top, self.owner)
        wanted = self.wanted.get(log or "", set())
        for entry in entries:
            assert replay is not None
            try:
                replay.apply(entry)
            except InvalidInput as error:
                self.report.fail("delegation", entry.stream, entry.revision, str(error))
            if entry.revision in wanted:
                kept = _LogReplay(self.report, tree, self.anchor, top, self.owner)
                kept.inherit(replay, None)
                self.states[(entry.stream, entry.revision)] = kept
        self.active.discard(top)
        self.done[top] = replay
        return replay


class _LogReplay:
    """One line's authority log applied in order: what every agent holds, which grants it
    names, the policies recorded on it (inherited ones included)."""

    def __init__(
        self,
        report: Report,
        tree: Tree,
        anchor: Policy | None,
        top: str,
        owner: Mapping[str, str],
    ) -> None:
        self.report, self.tree, self.anchor = report, tree, anchor
        self.top, self.owner = top, owner
        self.policies = Policies()
        self.held: dict[str, Any] = {}
        self.logged: set[str] = set()
        self.resets: list[tuple[str, str]] = []
        self._last: dict[str, int] = {}  # stream -> revision of the last grant named on it
        self._next_index = 0  # the newest aj.next_index of a grant named so far

    def inherit(self, state: _LogReplay, next_index: int | None) -> None:
        """Start from ``state`` (what a fork's bound entry leaves every agent holding, and
        the policies recorded up to it). A branch's own grants are on its own streams and
        its message indexes go on from its ``next_index``, which a cut inside a write may
        put below the last inherited grant's write's."""
        self.policies = state.policies.copy()
        self.held = dict(state.held)
        self._last = dict(state._last)
        self._next_index = (
            state._next_index if next_index is None else min(state._next_index, next_index)
        )

    def apply(self, entry: Record) -> None:
        """Apply one entry.

        Raises:
            InvalidInput: The entry is malformed or names what is not there.
        """
        body = entry.body
        if body is None:
            raise InvalidInput(f"{entry.type} is not a JSON object")
        data = json.dumps(body).encode()
        if entry.type == events.POLICY_RECORDED:
            self._policy(entry, events.PolicyRecorded.decode(data))
        elif entry.type == events.AUTHORITY_RESET:
            reset = events.AuthorityReset.decode(data)
            self.policies.get(reset.policy)
            after = {name: value for name, value in self.held.items() if name != reset.agent}
            self._advance(entry, reset.held, after)
            self.resets.append((reset.agent, reset.reason))
        elif entry.type == events.AUTHORITY_HELD:
            self._grant(entry, events.AuthorityHeld.decode(data))
        else:
            raise InvalidInput(f"{entry.type} does not belong on the authority log")

    def _policy(self, entry: Record, recorded: events.PolicyRecorded) -> None:
        where = ("delegation", entry.stream, entry.revision)
        policy = Policy.from_json(recorded.policy)
        if policy.digest != recorded.digest:
            self.report.fail(*where, "the policy does not match its digest")
        elif self.anchor is not None and recorded.digest != self.anchor.digest:
            self.report.fail(
                *where, f"the session ran under policy {recorded.digest}, not the one given"
            )
        self.policies.add(recorded.digest, policy)
        self.tree.policies.add(recorded.digest, policy)  # for containment's rules

    def _grant(self, entry: Record, record: events.AuthorityHeld) -> None:
        tree = self.tree
        policy = self.policies.get(record.policy)
        grant = tree.by_id.get(record.event)
        if grant is None or grant.stream != record.stream or _cause_of(grant) != record.cause:
            raise InvalidInput(f"the {record.cause} grant {record.event} is not in the tree")
        if self.owner.get(grant.stream, tree.session_stream) != self.top:
            raise InvalidInput(
                f"the log of line {self.top} names {grant.stream}@{grant.revision}, a grant of "
                "another line"
            )
        self._in_order(grant)
        agent = agent_of(grant)
        if agent != record.agent:
            raise InvalidInput(f"the grant is for {agent!r}, its log entry for {record.agent!r}")
        granted = tree.authority(grant)
        own = policy.authority_of(record.agent)
        sender: Authority | None = None
        if record.cause == "handoff":
            sender = authority_at(tree, grant.stream, grant.revision)
            expected = meet(sender, own) if sender is not None else None
        else:
            expected = _run_root(tree, grant, own, self.held.get(record.agent))
        at = ("delegation", grant.stream, grant.revision)
        if expected is None or granted is None:
            self.report.fail(*at, "a grant without the sender's authority")
        elif sender is not None and not granted.is_narrower_than(sender):
            self.report.fail(*at, f"the authority granted to {agent} is wider than its sender's")
        elif granted != expected:
            self.report.fail(
                *at,
                f"{agent} was granted {granted.to_json()}, but the policy gives "
                f"{expected.to_json()}",
            )
        elif Authority.from_json(record.authority) != granted:
            self.report.fail(
                "delegation", entry.stream, entry.revision, "the log entry differs from its grant"
            )
        self.logged.add(grant.id)
        self._advance(entry, record.held, {**self.held, record.agent: record.authority})

    def _in_order(self, grant: Record) -> None:
        """The log names grants in the order they were written: by revision on each stream,
        and never back in the session's message order (``aj.next_index``).

        Raises:
            InvalidInput: It does not (entries were moved, e.g. to hide a reset).
        """
        index = metadata_int(grant.metadata.get(events.NEXT_INDEX_KEY)) or 0
        if grant.revision <= self._last.get(grant.stream, -1) or index < self._next_index:
            raise InvalidInput(
                f"the authority log names {grant.stream}@{grant.revision} out of the order "
                "it was written"
            )
        self._last[grant.stream] = grant.revision
        self._next_index = index

    def _advance(self, entry: Record, recorded: Any, expected: dict[str, Any]) -> None:
        """Take ``expected`` as what every agent holds, failing if the entry says otherwise."""
        if not isinstance(recorded, Mapping) or {
            name: Authority.from_json(value) for name, value in recorded.items()
        } != {name: Authority.from_json(value) for name, value in expected.items()}:
            self.report.fail(
                "delegation", entry.stream, entry.revision, "what every agent holds does not add up"
            )
        self.held = expected


def _run_root(tree: Tree, grant: Record, own: Authority, last: Any) -> Authority:
    """What a run's first agent may hold: its entry met with what it last held, or —
    resuming inside an open subagent — with that subagent's grant (nothing without one)."""
    if not tree.is_top(grant.stream):
        opener = tree.opener(grant.stream)
        opened = tree.authority(opener) if opener is not None else None
        return meet(own, opened) if opened is not None else Authority()
    return meet(own, Authority.from_json(last)) if last is not None else own


def _check_narrowing(
    report: Report, tree: Tree, grants: list[Record], *, summary: bool = True
) -> None:
    """Without a log: each handoff grant is narrower than its sender's authority (on a
    line with no log while another line has one, ``summary`` is off: the caller sums up)."""
    checked = 0
    for opener in grants:
        if opener.type != events.SUBAGENT_STARTED:
            continue
        checked += 1
        granted = tree.authority(opener)
        sender = authority_at(tree, opener.stream, opener.revision)
        where = ("delegation", opener.stream, opener.revision)
        if sender is None:
            report.fail(*where, "a grant without the sender's authority")
        elif granted is not None and not granted.is_narrower_than(sender):
            report.fail(*where, "the authority granted is wider than its sender's")
    if summary and not report.failed("delegation"):
        report.lines.append(
            f"delegation: no policy recorded; {plural(checked, 'grant')}, "
            "each narrower than its sender's"
            if checked
            else "delegation: no authority was granted along a handoff"
        )
