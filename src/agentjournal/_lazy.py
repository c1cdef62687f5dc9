"""Names a package exports from its modules, each module imported on first use.

A package's ``__init__`` maps each public name to the module that defines it and
sets ``__getattr__, __dir__ = exports(__name__, NAMES)`` (PEP 562), so ``import
agentjournal.ledger`` costs nothing until a name is used, and importing one
module of a package never drags in its siblings (the verifier never loads the
exporter's store, the protocol models never load the HTTP client). The package
also imports every name under ``TYPE_CHECKING``, for type checkers and editors;
``tests/test_public_api.py`` checks the two lists agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` that imports ``names[name]`` and returns its ``name``, and
    the module's ``__dir__`` listing those names before their first use (for ``dir()``
    and completion in editors and notebooks).

    Args:
        package: The package's ``__name__``.
        names: Public name -> the module that defines it (absolute).
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
