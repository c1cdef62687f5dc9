"""Authority: what an agent may do, and the meet that makes a handoff receiver's (pure).

An :class:`Authority` is a set of **scopes** and a map of named **ceilings**.

Scopes are dotted lowercase names (``billing.refund``); a wildcard is only
the whole last segment (``billing.*`` covers ``billing.refund`` and
``billing.refund.partial``, not ``billing`` itself).

Ceilings are typed limits on what a call may carry:

========================  =================================  =====================
kind                      permits a value when               meet of two
========================  =================================  =====================
:class:`Cap`              an int (not a bool) ``<= limit``   the lower limit
:class:`Ranked`           a level of the same order, ``<=``  the lower level
:class:`AllowList`        a string in ``values``             the intersection
:class:`DenyList`         a string not in ``values``         the union
:class:`Nothing`          never                              ``Nothing``
========================  =================================  =====================

:func:`meet` is the only way to make a child authority: the result is below
both inputs, so a chain of handoffs can narrow authority but never widen it.
Two ceilings of one name but different kinds (or orders) meet to
:class:`Nothing`; a scope or ceiling that cannot be read is refused when the
authority is built. Everything here is immutable and has no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from agentjournal.errors import InvalidInput

_SCOPE: Final = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?$")


def validate_scope(scope: Any) -> str:
    """Return ``scope`` if it is a well-formed scope, else raise :class:`InvalidInput`."""
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise InvalidInput(
            f"scope {scope!r} is not dotted lowercase names with an optional final '.*' "
            "(e.g. 'billing.refund' or 'billing.*')"
        )
    return scope


def covers(held: str, needed: str) -> bool:
    """Whether the held scope includes every action of the needed one."""
    if held == needed:
        return True
    if held.endswith(".*"):
        return needed.startswith(held[:-1])  # 'billing.' prefixes 'billing.x' and 'billing.x.*'
    return False


def _minimal(scopes: Iterable[str]) -> frozenset[str]:
    """Drop scopes another one of the set already covers."""
    unique = set(scopes)
    return frozenset(s for s in unique if not any(o != s and covers(o, s) for o in unique))


# -- ceilings -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cap:
    """A numeric cap: an integer value (minor units, rows, ...) may not exceed ``limit``."""

    limit: int

    def __post_init__(self) -> None:
        if not _is_int(self.limit):
            raise InvalidInput(f"a cap's limit must be an integer, got {self.limit!r}")

    def permits(self, value: Any) -> bool:
        return _is_int(value) and value <= self.limit

    def to_json(self) -> dict[str, Any]:
        return {"kind": "cap", "limit": self.limit}


@dataclass(frozen=True, slots=True)
class Ranked:
    """A ranked enumeration: a value may be ``level`` or any level before it in ``order``."""

    order: tuple[str, ...]
    level: str

    def __post_init__(self) -> None:
        if len(self.order) < 1 or len(set(self.order)) != len(self.order):
            raise InvalidInput(f"a ranked order needs distinct levels, got {self.order!r}")
        if not all(isinstance(level, str) for level in self.order):
            raise InvalidInput(f"ranked levels must be strings, got {self.order!r}")
        if self.level not in self.order:
            raise InvalidInput(f"level {self.level!r} is not one of {self.order!r}")

    def permits(self, value: Any) -> bool:
        return (
            isinstance(value, str)
            and value in self.order
            and self.order.index(value) <= self.order.index(self.level)
        )

    def to_json(self) -> dict[str, Any]:
        return {"kind": "ranked", "order": list(self.order), "level": self.level}


@dataclass(frozen=True, slots=True)
class AllowList:
    """Only these string values are permitted."""

    values: frozenset[str]

    def __post_init__(self) -> None:
        if not all(isinstance(v, str) for v in self.values):
            raise InvalidInput(f"allow-list values must be strings, got {sorted(self.values)!r}")

    def permits(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def to_json(self) -> dict[str, Any]:
        return {"kind": "allow", "values": sorted(self.values)}


@dataclass(frozen=True, slots=True)
class DenyList:
    """These string values are refused; other strings are permitted."""

    values: frozenset[str]

    def __post_init__(self) -> None:
        if not all(isinstance(v, str) for v in self.values):
            raise InvalidInput(f"deny-list values must be strings, got {sorted(self.values)!r}")

    def permits(self, value: Any) -> bool:
        return isinstance(value, str) and value not in self.values

    def to_json(self) -> dict[str, Any]:
        return {"kind": "deny", "values": sorted(self.values)}


@dataclass(frozen=True, slots=True)
class Nothing:
    """Permits no value: what two ceilings that cannot be compared meet to."""

    def permits(self, value: Any) -> bool:
        return False

    def to_json(self) -> dict[str, Any]:
        return {"kind": "nothing"}


NOTHING: Final = Nothing()

Ceiling: TypeAlias = Cap | Ranked | AllowList | DenyList | Nothing


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def meet_ceilings(a: Ceiling, b: Ceiling) -> Ceiling:
    """The tighter of two ceilings of one name; :data:`NOTHING` when they cannot be compared."""
    if isinstance(a, Cap) and isinstance(b, Cap):
        return a if a.limit <= b.limit else b
    if isinstance(a, Ranked) and isinstance(b, Ranked) and a.order == b.order:
        return a if a.order.index(a.level) <= a.order.index(b.level) else b
    if isinstance(a, AllowList) and isinstance(b, AllowList):
        return AllowList(a.values & b.values)
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return DenyList(a.values | b.values)
    return NOTHING


def ceiling_at_most(child: Ceiling, parent: Ceiling) -> bool:
    """Whether ``child`` permits no value that ``parent`` refuses."""
    return meet_ceilings(child, parent) == child


def ceiling_from_json(body: Any) -> Ceiling:
    """Read a ceiling from its JSON/YAML form (see :meth:`Authority.to_json`)."""
    if not isinstance(body, Mapping):
        raise InvalidInput(f"a ceiling must be a mapping with a 'kind', got {body!r}")
    kind = body.get("kind")
    extra = set(body) - {"kind", "limit", "order", "level", "values"}
    if extra:
        raise InvalidInput(f"unknown ceiling fields {sorted(extra)} in {dict(body)!r}")
    if kind == "cap":
        return Cap(body.get("limit"))  # type: ignore[arg-type]
    if kind == "ranked":
        order = body.get("order")
        if not isinstance(order, list | tuple) or not all(isinstance(o, str) for o in order):
            raise InvalidInput(f"a ranked ceiling needs an 'order' list of strings, got {order!r}")
        return Ranked(tuple(order), body.get("level"))  # type: ignore[arg-type]
    if kind in ("allow", "deny"):
        values = body.get("values")
        if not isinstance(values, list | tuple | set | frozenset) or not all(
            isinstance(value, str) for value in values
        ):
            raise InvalidInput(f"a {kind} ceiling needs a 'values' list of strings, got {values!r}")
        return (AllowList if kind == "allow" else DenyList)(frozenset(values))
    if kind == "nothing":
        return NOTHING
    raise InvalidInput(f"unknown ceiling kind {kind!r}: use cap, ranked, allow, deny or nothing")


# -- authority ----------------------------------------------------------------------


@dataclass(frozen=True)
class Authority:
    """What an agent may do: scopes and named ceilings (immutable, normalised).

    Args:
        scopes: Scopes held (see the module docs); redundant ones are dropped.
        ceilings: Ceiling name -> ceiling.

    Raises:
        InvalidInput: A scope or ceiling is malformed.
    """

    scopes: frozenset[str] = field(default_factory=frozenset)
    ceilings: Mapping[str, Ceiling] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scopes = [validate_scope(scope) for scope in self.scopes]
        object.__setattr__(self, "scopes", _minimal(scopes))
        ceilings = dict(self.ceilings)
        for name, ceiling in ceilings.items():
            if not isinstance(name, str) or not name:
                raise InvalidInput(f"a ceiling name must be a non-empty string, got {name!r}")
            if not isinstance(ceiling, Cap | Ranked | AllowList | DenyList | Nothing):
                raise InvalidInput(f"ceiling {name!r} is not a known kind: {ceiling!r}")
        object.__setattr__(self, "ceilings", _Frozen(ceilings))

    @classmethod
    def of(cls, *scopes: str, **ceilings: Ceiling) -> Authority:
        """``Authority.of("billing.*", spend=Cap(50000))``."""
        return cls(frozenset(scopes), ceilings)

    def holds(self, needed: str) -> bool:
        """Whether one of the scopes covers ``needed``."""
        return any(covers(held, needed) for held in self.scopes)

    def is_narrower_than(self, parent: Authority) -> bool:
        """Whether this authority permits nothing ``parent`` does not (equal counts as narrower)."""
        if not all(parent.holds(scope) for scope in self.scopes):
            return False
        for name, ceiling in parent.ceilings.items():
            mine = self.ceilings.get(name)
            if mine is None or not ceiling_at_most(mine, ceiling):
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """``{"scopes": [...sorted], "ceilings": {name: {"kind": ..., ...}}}``."""
        return {
            "scopes": sorted(self.scopes),
            "ceilings": {name: self.ceilings[name].to_json() for name in sorted(self.ceilings)},
        }

    @classmethod
    def from_json(cls, body: Any) -> Authority:
        """Read an authority from its JSON/YAML form.

        Raises:
            InvalidInput: Unknown fields, scopes or ceiling kinds, or wrong value types.
        """
        if not isinstance(body, Mapping):
            raise InvalidInput(f"an authority must be a mapping, got {body!r}")
        extra = set(body) - {"scopes", "ceilings"}
        if extra:
            raise InvalidInput(f"unknown authority fields {sorted(extra)}")
        scopes = body.get("scopes", [])
        ceilings = body.get("ceilings", {})
        if not isinstance(scopes, list | tuple) or not isinstance(ceilings, Mapping):
            raise InvalidInput("an authority has a 'scopes' list and a 'ceilings' mapping")
        if not all(isinstance(scope, str) for scope in scopes):
            raise InvalidInput(f"scopes must be strings, got {scopes!r}")
        return cls(
            frozenset(scopes),
            {name: ceiling_from_json(value) for name, value in ceilings.items()},
        )


class _Frozen(dict[str, Ceiling]):
    """A dict that cannot change and can be hashed (an authority's ceilings)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("an authority's ceilings cannot change")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse


def meet(parent: Authority, request: Authority) -> Authority:
    """The greatest authority below both: what a receiver that asked for ``request`` gets.

    Scopes: those of each side that the other side covers. Ceilings: every
    ceiling of either side, the tighter where both have one; a ceiling only
    one side has still binds (a request cannot drop the parent's ceiling).
    """
    scopes = {s for s in parent.scopes if request.holds(s)}
    scopes |= {s for s in request.scopes if parent.holds(s)}
    ceilings: dict[str, Ceiling] = dict(parent.ceilings)
    for name, ceiling in request.ceilings.items():
        ceilings[name] = meet_ceilings(ceilings[name], ceiling) if name in ceilings else ceiling
    return Authority(frozenset(scopes), ceilings)


def excess(request: Authority, parent: Authority) -> str | None:
    """What ``request`` asks for beyond ``parent``; None when the meet grants all of it.

    This is the handoff question: a receiver's request may leave a ceiling
    out (it inherits the parent's through :func:`meet`) but may not ask for a
    scope the parent lacks or a looser ceiling than the parent's.
    """
    wider = sorted(scope for scope in request.scopes if not parent.holds(scope))
    if wider:
        return f"scopes the sender lacks: {wider}"
    for name, ceiling in sorted(request.ceilings.items()):
        held = parent.ceilings.get(name)
        if held is not None and not ceiling_at_most(ceiling, held):
            return (
                f"a looser ceiling {name!r} ({ceiling.to_json()}) "
                f"than the sender's ({held.to_json()})"
            )
    return None
