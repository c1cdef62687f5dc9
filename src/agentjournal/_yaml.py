"""Reading YAML the way every agentjournal file is read: one line naming where it broke.

Policies, price tables, guardrail rules, manifests and model scripts are YAML (or
JSON, which YAML reads too); a mistake in any of them is one line — the file, the
line and column, the problem — never a parser's traceback.
"""

from __future__ import annotations

import os
from typing import Any

from agentjournal.errors import InvalidInput


def parse_yaml(text: str) -> Any:
    """The document in ``text``.

    Raises:
        InvalidInput: ``not valid YAML at line L column C: problem``.
    """
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InvalidInput(f"not valid YAML{where}: {problem}") from None


def read_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """The document in the file at ``path``, a ``what`` (``"policy"``, ``"prices"``).

    Raises:
        InvalidInput: ``cannot read WHAT PATH: reason`` or ``WHAT PATH is not valid YAML at
            line L column C: problem``.
    """
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise InvalidInput(f"cannot read {what} {name}: {reason}") from None
    try:
        return parse_yaml(text)
    except InvalidInput as error:
        raise InvalidInput(f"{what} {name} is {error}") from None
