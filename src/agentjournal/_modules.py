"""Loading a user's Python file as a module (``--tools FILE``, ``--candidate FILE:agent``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from agentjournal._text import printable
from agentjournal.errors import InvalidInput


def load_file(path: Path, prefix: str, where: str) -> ModuleType:
    """The module of the Python file at ``path`` (resolved), named ``prefix`` and the path's
    hash, loaded once per process; anything the file raises is reported in one line that
    starts with ``where`` (a ``SystemExit`` or ``KeyboardInterrupt`` goes on as raised), and
    leaves no half-loaded module behind."""
    name = f"{prefix}_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidInput(f"{where}: {printable(path.name)} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        del sys.modules[name]
        if not isinstance(error, Exception):
            raise
        raise InvalidInput(
            f"{where}: importing {printable(path.name)} failed: {type(error).__name__}: "
            + printable(str(error))
        ) from None
    return module
