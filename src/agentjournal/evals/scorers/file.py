"""The scorers file: a YAML (or JSON) list of scorers, every entry checked before any is used.

::

    scorers:
      - name: refund-called
        rule: tool_called
        tool: refund
        arguments: {order_id: "42"}
      - name: answers
        reference: {support-1: {1: "Order 42 was charged twice."}}
      - name: helpful
        judge: Is the answer correct, polite and complete?
        model: gpt-4.1-mini
      - name: ours
        callable: our_evals.checks:no_apology

Each entry is one scorer, its kind told by the one key among ``rule``, ``reference``,
``judge`` and ``callable`` it has (docs/scorers.md has every kind's keys). Names are
unique; paths (``script``, a reference file) are relative to the file. A mistake is one
line naming the file and the entry: ``scorers.yaml: entry 3 (refund-called): unknown rule
'tool_caled' (rules: ...)``. A file without a judge does not import the Agents SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from agentjournal._yaml import read_yaml
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Scorer
from agentjournal.evals.scorers.entry import common

KINDS: Final = ("rule", "reference", "judge", "callable")
"""The keys that say what kind of scorer an entry is (exactly one per entry)."""


def load_scorers(path: str | os.PathLike[str]) -> list[Scorer]:
    """The scorers a scorers file names, in its order.

    Raises:
        InvalidInput: The file cannot be read, is not YAML, or an entry is malformed (one
            line naming the file and the entry).
    """
    document = read_yaml(path, "scorers")
    return scorers_of(document, source=os.fspath(path), base=Path(path).parent)


def scorers_of(document: Any, *, source: str, base: Path) -> list[Scorer]:
    """The scorers of a parsed scorers file (``{scorers: [...]}`` or the list alone).

    Args:
        document: The file as parsed.
        source: What messages call the file.
        base: The folder relative paths start from.

    Raises:
        InvalidInput: It is not a list of scorers, or an entry is malformed.
    """
    entries = document.get("scorers") if isinstance(document, Mapping) else document
    if isinstance(document, Mapping) and set(document) != {"scorers"}:
        extra = sorted(map(str, set(document) - {"scorers"}))
        raise InvalidInput(
            f"{source}: a scorers file is a list of scorers, or a mapping with one key, "
            f"scorers" + (f" (found {', '.join(extra)})" if extra else "")
        )
    if not isinstance(entries, list) or not entries:
        raise InvalidInput(f"{source}: expected a non-empty list of scorers")
    found: list[Scorer] = []
    names: dict[str, int] = {}
    for number, entry in enumerate(entries, start=1):
        label = _label(number, entry)
        try:
            scorer = _scorer(entry, base)
        except InvalidInput as error:
            raise InvalidInput(f"{source}: {label}: {error}") from None
        if scorer.name in names:
            raise InvalidInput(
                f"{source}: {label}: the name {scorer.name!r} is taken by entry "
                f"{names[scorer.name]} (names are unique)"
            )
        names[scorer.name] = number
        found.append(scorer)
    return found


def _label(number: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"entry {number} ({name})" if isinstance(name, str) and name else f"entry {number}"


def _scorer(entry: Any, base: Path) -> Scorer:
    if not isinstance(entry, Mapping):
        raise InvalidInput(f"expected a mapping with a name and one of {', '.join(KINDS)}")
    kinds = [kind for kind in KINDS if kind in entry]
    if len(kinds) != 1:
        given = f" (it has {', '.join(kinds)})" if kinds else ""
        raise InvalidInput(f"give exactly one of {', '.join(KINDS)}{given}")
    shared = common(entry)
    (kind,) = kinds
    if kind == "rule":
        from agentjournal.evals.scorers.rules import rule_scorer

        return rule_scorer(shared, entry)
    if kind == "reference":
        from agentjournal.evals.scorers.reference import reference_scorer

        return reference_scorer(shared, entry, base)
    if kind == "callable":
        from agentjournal.evals.scorers.callable import callable_scorer

        return callable_scorer(shared, entry)
    from agentjournal.evals.scorers.judge import judge_scorer  # loads the Agents SDK

    return judge_scorer(shared, entry, base)
