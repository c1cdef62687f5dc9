"""The offline verifier's entry points and the order its stages run in (pure: no store, no
network).

A bundle (:mod:`agentjournal.audit.bundle` writes one) holds every stream of a
session tree with every event's revision, id, type, metadata, data digest and
data — or, in a redacted bundle, no data but a committed view
(:mod:`agentjournal.ledger.redaction`). :func:`verify_bundle` checks, in order:

1. **Structure** — the format, no unknown or missing fields, no empty bundle.
2. **Integrity** — per stream: revisions 0, 1, 2, ... with no gap; each
   event's data matches its digest; ``aj.seq`` is its revision, ``aj.prev`` the
   previous event's hash, and ``aj.hash`` recomputes (:mod:`agentjournal.ledger`);
   a view matches its commitment ``aj.redacted`` (recomputed from the data when
   the data is there); only the data redaction may withhold is withheld.
3. **Twins** — each handoff's ``SubagentStarted`` and each
   ``SubagentCompleted`` exist on both streams and name each other, the two
   copies of ``SubagentStarted`` grant the same authority; a closed subsession
   ends with its completion, whose hash the parent recorded.
   Then the branches (each bound to its parent line) and the **guards**: each
   ``agentjournal.LineGuarded`` sits on a line's top stream and names the clear or
   reset it guards, which names it back.
4. **Checkpoints** — the trusted keys are the caller's (never the bundle's)
   and every key a chain of valid rotations on ``AgentKeys`` leads to from
   them; each checkpoint is signed by one, sits at the ledger position it
   signed, and names heads that exist with those hashes; together they cover
   every event (closed subsessions through the ``aj.closes_hash`` of their
   covered parent event). Anything after them is uncovered and fails unless
   allowed.
5. **Delegation** — the authority log replayed in order: each policy's digest
   recomputes (and is the caller's ``policy`` when one is given); each grant is
   recomputed from the policy it names — a run's first agent holds its entry
   met with what it last held (or, resuming inside an open subagent, with that
   subagent's grant), a handoff's receiver ``meet(sender's authority, its
   entry)`` — and every grant of the tree is on the log. Per line: a branch's
   log is its parent line's up to the entry its fork binds (recursively), then
   its own; each line's grants are on its own log. Without a
   log, each grant must be narrower than its sender's.
6. **Containment** — every executed tool call of a guarded session had an
   ALLOW or MODIFY decision about exactly that call, and every executed tool
   call of a session with a policy was within the calling agent's authority
   under the recorded policy's rule; every refusal is one the policy makes.
7. **Approvals** — every call that waited for a person ran only after an answer to its
   question on its stream that counts: for the same arguments, ``approved``, signed by an
   approver when the recorded policy names approvers for the tool; a rejected call never
   started its tool; no answer before its question, twice, or to no question.
8. **Usage** — every ``agentjournal.ModelResponded`` is one this version
   reads, of this session, on a stream of its tree, with the response id its
   metadata names; the report totals their tokens.

The report names the first bad stream and revision.

An eval run's bundle (``agentjournal-eval-bundle``) goes through the same structure,
integrity and checkpoints stages over its streams (``EvalRun-{run_id}``, its ledger, the
keys), with the eval stage (``_evals``) between integrity and checkpoints: every event a
valid schema event, every score in [0, 1], nothing scored twice, the totals of
``EvalRunCompleted`` those of its scores (:func:`verify_eval_records`).

Each stage is a module of this package, testable alone: ``_parse`` (structure),
``_integrity``, ``_twins``, ``_branches`` with ``_prefix``, ``_guards``, ``_checkpoints``,
``_authority`` (delegation), ``_containment``, ``_approvals`` and ``_usage``; the stages
after integrity read the session tree through ``_tree``, and all report into ``_report``.
``_parallel`` runs the integrity stage of a large tree on two processes (``workers``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal._forked import reap
from agentjournal._gc import no_collection
from agentjournal._text import plural
from agentjournal.audit.verify._approvals import check_approvals
from agentjournal.audit.verify._authority import check_authority
from agentjournal.audit.verify._branches import check_branches
from agentjournal.audit.verify._checkpoints import check_checkpoints
from agentjournal.audit.verify._containment import check_containment
from agentjournal.audit.verify._erasure import check_erasure
from agentjournal.audit.verify._evals import check_eval_run, run_streams
from agentjournal.audit.verify._guards import check_guards
from agentjournal.audit.verify._integrity import Markers, check_chain
from agentjournal.audit.verify._parallel import check_integrity
from agentjournal.audit.verify._parse import (
    Malformed,
    Unformed,
    check_forms,
    eval_bundle_records,
    fail_form,
    is_eval_bundle,
    parse_bundle,
    read_bundle,
)
from agentjournal.audit.verify._report import Problem, Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.audit.verify._twins import check_twins
from agentjournal.audit.verify._usage import check_responses
from agentjournal.authority import Policy
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.records import Record, TreeRecords
from agentjournal.streams import session_stream

__all__ = [
    "Problem",
    "Report",
    "parse_bundle",
    "verify_bundle",
    "verify_eval_records",
    "verify_records",
]

# What a crafted event can make a check raise: each is a failure to report, never a crash
# (RecursionError: JSON nested deeper than the parser goes; LookupError: a missing key or
# index; OverflowError: a number too large for a float).
_MALFORMED: Final = (
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    RecursionError,
    OverflowError,
    InvalidInput,
    CodecError,
)


def verify_bundle(
    bundle: Any,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
    policy: Policy | None = None,
    workers: int | None = None,
) -> Report:
    """Verify a parsed bundle against the trusted public keys (key id -> key).

    Args:
        bundle: The parsed JSON of a bundle. What :func:`parse_bundle` returns is read as
            vouched for, its text exactly ``str`` (so its metadata is not looked at for a
            subclass of ``str``): pass it unchanged; any other object is looked at whole.
        trusted: Key id -> public key; only these keys' checkpoints count, and those of
            keys a chain of valid rotations in the bundle leads to from them.
        allow_uncovered: Report events after the last checkpoint as warnings.
        not_before: An RFC 3339 time the last checkpoint may not be older than.
            Without an outside anchor like this, a bundle cut back to an
            earlier checkpoint (and its signature) is indistinguishable from
            the session as it was then.
        policy: The policy the session must have run under (an outside anchor,
            like the keys): every policy the bundle records must be this one.
        workers: How many processes check the chains: 1, this one; 2, this one and a
            forked child on the second core, wherever forking is safe (Linux, no other
            thread running); None (the default), 2 for a tree of 4,000 events or more when
            a core is free (:func:`~agentjournal._forked.core_to_spare`), else 1. The report is
            the same.

    An eval run's bundle (``agentjournal-eval-bundle``) is verified as
    :func:`verify_eval_records` verifies its records (``policy`` does not apply).

    Raises:
        InvalidInput: ``workers`` is not None, 1 or 2.
    """
    _check_workers(workers)
    # Verification makes records, views and markers by the thousand, none in a cycle: the
    # cyclic collector would scan them (and the bundle) again and again as they pile up.
    with no_collection(), _reaping():
        return _verify_bundle(
            bundle,
            trusted,
            allow_uncovered=allow_uncovered,
            not_before=not_before,
            policy=policy,
            workers=workers,
        )


def _verify_bundle(
    bundle: Any,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
    policy: Policy | None,
    workers: int | None,
) -> Report:
    if is_eval_bundle(bundle):
        try:
            run_id, streams = eval_bundle_records(bundle)
        except Malformed as error:
            report = Report()
            report.fail("structure", error.stream, error.revision, str(error))
            return report
        except InvalidInput as error:
            report = Report()
            report.fail("structure", "bundle", None, str(error))
            return report
        return _verify_eval(
            run_id, streams, trusted, allow_uncovered=allow_uncovered, not_before=not_before
        )
    try:
        tree, unformed = read_bundle(bundle)
    except Malformed as error:
        report = Report()
        report.fail("structure", error.stream, error.revision, str(error))
        return report
    except InvalidInput as error:
        report = Report()
        report.fail("structure", "bundle", None, str(error))
        return report
    return _verify_records(  # already without the collector
        tree,
        trusted,
        allow_uncovered=allow_uncovered,
        not_before=not_before,
        policy=policy,
        workers=workers,
        unformed=unformed,
    )


def verify_records(
    records: TreeRecords,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
    policy: Policy | None = None,
    workers: int | None = None,
) -> Report:
    """Verify a session tree's records (from a bundle, or read from a store with
    :func:`agentjournal.walk.read_tree`); the arguments as for :func:`verify_bundle`."""
    _check_workers(workers)
    with no_collection(), _reaping():  # as in verify_bundle
        return _verify_records(
            records,
            trusted,
            allow_uncovered=allow_uncovered,
            not_before=not_before,
            policy=policy,
            workers=workers,
        )


def verify_eval_records(
    run_id: str,
    streams: Mapping[str, list[Record]],
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
) -> Report:
    """Verify an eval run's records (from its bundle, or read from a store with
    :func:`agentjournal.audit.export.eval_run_records`): its streams' chains, the eval
    stage, and the checkpoints on ``AgentLedger-EvalRun-{run_id}`` (the arguments as for
    :func:`verify_bundle`)."""
    with no_collection():
        return _verify_eval(
            run_id, streams, trusted, allow_uncovered=allow_uncovered, not_before=not_before
        )


def _verify_eval(
    run_id: str,
    records: Mapping[str, list[Record]],
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
) -> Report:
    report = Report()
    streams = {name: list(stream) for name, stream in records.items()}
    run, _ = run_streams(run_id)
    total = sum(len(stream) for stream in streams.values())
    withheld = sum(1 for stream in streams.values() for e in stream if e.data is None)
    report.lines.append(
        f"eval run {run_id}: {plural(len(streams), 'stream')}, {plural(total, 'event')} "
        f"({withheld} withheld)"
    )
    if not check_forms(report, streams):
        return report
    markers: Markers = {}
    for name, stream in streams.items():
        check_chain(report, name, stream, markers)
    if report.problems:
        report.lines.append("integrity: FAILED")
        return report
    report.lines.append(
        f"integrity: {plural(total, 'event')} in {plural(len(streams), 'stream')} chain correctly"
    )
    try:
        check_eval_run(report, run_id, streams)
        if report.problems:
            return report
        tree = Tree(run, run, streams, markers)
        check_checkpoints(report, tree, trusted, allow_uncovered, not_before)
    except _MALFORMED as error:
        report.fail("eval", run, None, f"malformed event: {type(error).__name__}: {error}")
    return report


@contextlib.contextmanager
def _reaping() -> Iterator[None]:
    """Reap, at the end, a second process that has ended by then (it ends as the stages
    after integrity run)."""
    try:
        yield
    finally:
        reap()


_MARKED: Final = "containment"
"""The one check after integrity that reads the call markers the views left: on two
processes the child, which checks the views, runs it."""
_FILLS: Final = "delegation"
"""The check that records the policies later checks read (``Tree.policies``): the child
runs it too, before its own, its report left aside."""
_IN_CHILD: Final = frozenset(
    {"twins", "branches", "guards", _MARKED, "approvals", "usage", "erasure"}
)
"""The checks after integrity the child runs on two processes: the marked one, and all the
others but the checkpoints' (and delegation, which both run), which balances the two
processes' shares: this process read the records, checks the chains but their views and
runs the checkpoints' check (its signatures are a third of it), each process taking a page
fault at its first write to each page they share (CPU of each, measured on the ledger
bench's tree: about the same)."""


def _after_integrity(
    report: Report,
    session_id: str,
    streams: dict[str, list[Record]],
    markers: Markers,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
    policy: Policy | None,
    part: Callable[[str], bool] = lambda check: True,
    reports: dict[str, Report | None] | None = None,
) -> bool:
    """The checks after integrity for which ``part`` holds, in order, each behind its guard;
    where the tree's indexes cannot be built, a structure failure and nothing else. With
    ``reports``, each check writes to a report of its own there, by name, and each check
    ``part`` leaves out is there too, in its place, as None (where another process's report
    of it goes).

    Returns:
        Whether the tree's indexes were built (else ``report`` says why).
    """
    root = session_stream(session_id)
    try:
        tree = Tree(session_id, root, streams, markers)
    except _MALFORMED as error:
        report.fail("structure", root, None, f"malformed lifecycle event: {error}")
        return False
    stages: list[tuple[str, Callable[[Report], None]]] = [
        ("twins", lambda into: check_twins(into, tree)),
        ("branches", lambda into: check_branches(into, tree)),
        ("guards", lambda into: check_guards(into, tree)),
        (
            "checkpoints",
            lambda into: check_checkpoints(into, tree, trusted, allow_uncovered, not_before),
        ),
        (_FILLS, lambda into: check_authority(into, tree, policy)),
        (_MARKED, lambda into: check_containment(into, tree, policy)),
        ("approvals", lambda into: check_approvals(into, tree)),
        ("usage", lambda into: check_responses(into, tree)),
        ("erasure", lambda into: check_erasure(into, tree)),
    ]
    for check, stage in stages:
        if not part(check):
            if reports is not None:
                reports[check] = None
            continue
        into = report
        if reports is not None:
            into = reports[check] = Report()
        try:
            stage(into)
        except _MALFORMED as error:  # a crafted event: a failure to report, never a crash
            into.fail(check, root, None, f"malformed event: {type(error).__name__}: {error}")
    return True


def _check_workers(workers: int | None) -> None:
    if workers is not None and (type(workers) is not int or workers not in (1, 2)):
        raise InvalidInput(f"workers must be None, 1 or 2, not {workers!r}")


def _verify_records(
    records: TreeRecords,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
    policy: Policy | None,
    workers: int | None,
    unformed: list[Unformed] | None = None,
) -> Report:
    """``unformed``: the records of the wrong form, where reading them checked their forms
    (:func:`read_bundle`); None to check them here."""
    report = Report()
    session_id = records.session_id
    streams = {name: list(stream) for name, stream in records.streams.items()}
    root = session_stream(session_id)
    total = sum(len(stream) for stream in streams.values())
    withheld = sum(1 for stream in streams.values() for e in stream if e.data is None)
    report.lines.append(
        f"session {session_id}: {plural(len(streams), 'stream')}, {plural(total, 'event')} "
        f"({withheld} withheld)"
    )
    if root not in streams or not streams[root]:
        report.fail("structure", root, None, "the session stream is missing or empty")
        return report
    markers: Markers = {}
    formed: list[bool] = []  # whether the records' forms are right (checked first)

    def forms() -> bool:
        if unformed is None:
            formed.append(check_forms(report, streams))
        else:
            if unformed:
                fail_form(report, *unformed[0])
            formed.append(not unformed)
        return formed[0]

    options: dict[str, Any] = {
        "allow_uncovered": allow_uncovered,
        "not_before": not_before,
        "policy": policy,
    }
    # On two processes: the checks after integrity but the child's, run here while the
    # child checks the views and then runs its own: whether the tree was built (else why
    # not, in the first report), and each check's report.
    here: list[tuple[bool, Report, dict[str, Report | None]]] = []

    def meanwhile() -> None:
        why: Report = Report()
        reports: dict[str, Report | None] = {}
        built = _after_integrity(
            why,
            session_id,
            streams,
            markers,
            trusted,
            part=lambda check: check not in _IN_CHILD,
            reports=reports,
            **options,
        )
        here.append((built, why, reports))

    def in_child(found: Markers) -> dict[str, Report]:
        reports: dict[str, Report | None] = {}
        _after_integrity(
            Report(),
            session_id,
            streams,
            found,
            trusted,
            # the check that fills what later ones read, its report written here
            part=lambda check: check in _IN_CHILD or check == _FILLS,
            reports=reports,
            **options,
        )
        return {check: made for check in _IN_CHILD if (made := reports.get(check)) is not None}

    # The form check runs first, on two processes once the child is forked (it costs as
    # much as a tenth of what the child does): a wrong form stops everything else.
    staged = check_integrity(
        report, streams, markers, workers=workers, then=in_child, meanwhile=meanwhile, forms=forms
    )
    if not formed[0]:
        return report
    if report.problems:
        report.lines.append("integrity: FAILED")
        return report  # nothing built on a broken chain can be trusted
    report.lines.append(
        f"integrity: {plural(total, 'event')} in {plural(len(streams), 'stream')} chain correctly"
    )
    if staged is None or not here or staged.keys() != _IN_CHILD:
        # no second process ran its part (or not all of it): everything runs here
        _after_integrity(report, session_id, streams, markers, trusted, **options)
        return report
    built, why, reports = here[0]
    report.extend(why)  # why the tree is not built, if it is not
    if built:
        for check, made in reports.items():  # each check's report in its place
            report.extend(made if made is not None else staged[check])
    return report
