"""``--model-script FILE`` of an experiment: the candidate's model answers, per session and turn.

The file (YAML or JSON) maps each session id to its turns by number; a turn holds what
each agent's model answers during it, in the manifest runner's ``--model-script`` format
(:mod:`agentjournal.runner.script`), or a list of answers of the candidate's first agent::

    support-4711:
      1:
        - tool_calls: [{name: lookup_order, arguments: {order_id: "42"}}]
        - text: Order 42 was charged twice; I refunded one charge.
      2:
        triage: [{text: Anything else?}]

Each turn gets fresh scripted models, so a turn's answers never depend on what an
earlier turn consumed (a rerun after a crash gets the same ones). A turn the file does
not list gets no answer: the candidate's model fails there, and the report says so.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentjournal._yaml import parse_yaml
from agentjournal.errors import InvalidInput
from agentjournal.runner.script import ModelScript, script_from


@dataclass(frozen=True)
class TurnScript:
    """The parsed file: per session, per turn, the runner-format document; its digest."""

    turns: Mapping[str, Mapping[int, Mapping[str, Any]]]
    source: str
    digest: str

    def for_turn(self, session: str, turn: int) -> ModelScript:
        """Fresh scripted models for ``turn`` of ``session`` (none: every model fails).

        Item and call ids carry the turn, so they differ from every other turn's of the
        session, as a real model's would.
        """
        document = self.turns.get(session, {}).get(turn, {})
        return script_from(dict(document), f"{self.source}: {session} turn {turn}", ids=f"{turn}_")


def load_turn_script(
    path: str | os.PathLike[str],
    *,
    sessions: Iterable[str],
    first_agent: str,
    agents: Iterable[str],
) -> TurnScript:
    """Read and check an experiment's model script.

    Args:
        path: The file.
        sessions: The experiment's sessions (the file's other sessions are left out).
        first_agent: The agent a list of answers belongs to.
        agents: The candidate's agent names: the file may name no other.

    Raises:
        InvalidInput: The file cannot be read, does not have the documented shape (the
            message names the session, turn and agent), or names none of ``sessions``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise InvalidInput(f"--model-script {path}: cannot be read ({error.strerror})") from None
    try:
        document = parse_yaml(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidInput(f"--model-script {path}: not YAML or JSON ({error})") from None
    if not isinstance(document, dict):
        raise InvalidInput(f"--model-script {path}: expected a mapping of session id to turns")
    wanted, known = set(sessions), set(agents)
    parsed: dict[str, dict[int, dict[str, Any]]] = {}
    for key, turns in document.items():
        session = str(key)
        where = f"--model-script {path}: {session}"
        if session not in wanted:  # a script may cover more sessions than one run takes
            continue
        if not isinstance(turns, dict):
            raise InvalidInput(f"{where}: expected a mapping of turn number to answers")
        parsed[session] = {}
        for turn, answers in turns.items():
            if type(turn) is not int or turn < 1:
                raise InvalidInput(f"{where}: turn {turn!r} is not a turn number (1, 2, ...)")
            body = {first_agent: answers} if isinstance(answers, list) else answers
            # Checked now (each turn's models are made again when it runs).
            script_from(body, f"{where} turn {turn}", known)
            parsed[session][turn] = body
    if not parsed:  # another file given by mistake (a scorers file ...): every turn would fail
        shown = ", ".join(sorted(wanted)[:3]) + (", ..." if len(wanted) > 3 else "")
        raise InvalidInput(f"--model-script {path}: names none of the sessions ({shown})")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    return TurnScript(parsed, str(path), digest)
