"""The erasure stage: content sealed under a data subject's key, and each erasure of it
(:func:`check_erasure`).

The verifier holds no subject key: it sees which events hold sealed content (``aj.enc``,
the key's id, committed by the chain) and each ``agentjournal.SubjectErased``. An erasure
must be on the session's stream, name only keys that content in the session is sealed
under, and name exactly the streams that hold it; no content may be sealed under an erased
key after the erasure. Each erased stream is reported ("content of subject S erased at T
by B (reason)"); the checks that need the sealed plaintext say so in their own lines.
"""

from __future__ import annotations

from typing import Final

from agentjournal import events
from agentjournal._text import plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.errors import CodecError
from agentjournal.records import Record
from agentjournal.shred.fields import KEY_ID_KEY

CHECK: Final = "erasure"


def is_sealed(record: Record) -> bool:
    """Whether ``record`` holds content sealed under a subject's key."""
    return KEY_ID_KEY in record.metadata


def check_erasure(report: Report, tree: Tree) -> None:
    """Check every erasure in the tree against the sealed content it names."""
    sealed: dict[str, dict[str, int]] = {}  # key id -> stream -> last revision sealed under it
    erasures: list[Record] = []
    for name, event in tree.marked[KEY_ID_KEY]:  # every stream's, in order
        sealed.setdefault(event.metadata[KEY_ID_KEY], {})[name] = event.revision
    for name, event in tree.noted:  # every stream's events of the types it holds, in order
        if event.type == events.SUBJECT_ERASED:
            if event.data is None:
                report.fail(CHECK, name, event.revision, "an erasure whose data is withheld")
                continue
            erasures.append(event)
    erased: set[str] = set()
    for event in erasures:
        where = (CHECK, event.stream, event.revision)
        try:
            erasure = events.SubjectErased.decode((event.data or "").encode())
        except CodecError as error:
            report.fail(*where, f"a malformed erasure: {error}")
            continue
        if event.stream != tree.session_stream:
            report.fail(*where, "an erasure not on the session's stream")
            continue
        unknown = [kid for kid in erasure.key_ids if kid not in sealed]
        if unknown:
            report.fail(
                *where, f"the erasure names keys no content here is sealed under: {unknown}"
            )
            continue
        holding = sorted({s for kid in erasure.key_ids for s in sealed[kid]})
        if sorted(erasure.streams) != holding:
            report.fail(
                *where,
                f"the erasure names streams {sorted(erasure.streams)}, but the content sealed "
                f"under its keys is on {holding}",
            )
            continue
        late = [
            kid
            for kid in erasure.key_ids
            if sealed[kid].get(tree.session_stream, -1) > event.revision
        ]
        if late:
            report.fail(*where, f"content sealed under keys {late} after they were erased")
            continue
        if tree.session_id not in erasure.sessions:
            report.fail(*where, "the erasure does not name this session")
            continue
        erased.update(erasure.key_ids)
        for erased_stream in erasure.streams:
            report.lines.append(
                f"erasure: {erased_stream}: content of subject {erasure.subject} erased at "
                f"{erasure.erased_at} by {erasure.by} ({erasure.reason})"
            )
    if sealed:
        streams = {stream for holding in sealed.values() for stream in holding}
        report.lines.append(
            f"sealed: content on {plural(len(streams), 'stream')} sealed under "
            f"{plural(len(sealed), 'subject key')} ({len(erased & sealed.keys())} erased); "
            "chains, checkpoints and signatures cover the ciphertext"
        )
