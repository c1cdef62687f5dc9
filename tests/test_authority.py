"""The authority model: scopes, ceilings, meet and narrowing (pure), with property tests."""

from __future__ import annotations

from functools import reduce
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal.authority import (
    NOTHING,
    AllowList,
    Authority,
    Cap,
    Ceiling,
    DenyList,
    Ranked,
    ceiling_from_json,
    covers,
    excess,
    meet,
)
from agentjournal.errors import InvalidInput

EGRESS = ("none", "internal", "any")

TRIAGE = Authority.of("billing.*", "kb.*", spend=Cap(50_000), egress=Ranked(EGRESS, "internal"))
BILLING_REQUEST = Authority.of("billing.read", "billing.refund", spend=Cap(5_000))


def test_the_seed_meet() -> None:
    granted = meet(TRIAGE, BILLING_REQUEST)
    assert granted.scopes == {"billing.read", "billing.refund"}
    assert granted.ceilings == {"spend": Cap(5_000), "egress": Ranked(EGRESS, "internal")}
    assert granted.is_narrower_than(TRIAGE)
    assert excess(BILLING_REQUEST, TRIAGE) is None
    assert (
        excess(Authority.of("infra.deploy"), TRIAGE) == "scopes the sender lacks: ['infra.deploy']"
    )
    assert "looser ceiling 'spend'" in (excess(Authority.of(spend=Cap(90_000)), TRIAGE) or "")


@pytest.mark.parametrize(
    ("held", "needed", "expected"),
    [
        ("billing.*", "billing.refund", True),
        ("billing.*", "billing.refund.partial", True),
        ("billing.*", "billing.*", True),
        ("billing.*", "billing.refund.*", True),
        ("billing.*", "billing", False),
        ("billing.*", "billingx.refund", False),
        ("billing.refund", "billing.refund", True),
        ("billing.refund", "billing.refund.partial", False),
        ("billing.refund.*", "billing.*", False),
    ],
)
def test_covers(held: str, needed: str, expected: bool) -> None:
    assert covers(held, needed) is expected


@pytest.mark.parametrize(
    "scope", ["Billing.read", "billing..read", "*", "billing.*.read", "billing.re*", "", ".a", 7]
)
def test_malformed_scopes_are_refused(scope: Any) -> None:
    with pytest.raises(InvalidInput, match="scope"):
        Authority(frozenset([scope]))


@pytest.mark.parametrize(
    ("ceiling", "allowed", "refused"),
    [
        (Cap(5_000), [0, 5_000, -3], [5_001, 5_000.0, True, "5000", None]),
        (Ranked(EGRESS, "internal"), ["none", "internal"], ["any", "ANY", 1, None]),
        (AllowList(frozenset({"eu", "us"})), ["eu"], ["cn", 3]),
        (DenyList(frozenset({"cn"})), ["eu", ""], ["cn", 3]),
        (NOTHING, [], [0, "x", None]),
    ],
)
def test_ceilings_permit_only_their_values(
    ceiling: Ceiling, allowed: list[Any], refused: list[Any]
) -> None:
    assert all(ceiling.permits(value) for value in allowed)
    assert not any(ceiling.permits(value) for value in refused)


def test_ceilings_that_cannot_be_compared_meet_to_nothing() -> None:
    a = Authority.of(spend=Cap(10))
    b = Authority.of(spend=Ranked(EGRESS, "any"))
    assert meet(a, b).ceilings["spend"] is NOTHING
    other_order = Authority.of(spend=Ranked(("low", "high"), "high"))
    assert meet(b, other_order).ceilings["spend"] is NOTHING


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "cap", "limit": "500"},
        {"kind": "cap", "limit": True},
        {"kind": "ranked", "order": ["a", "a"], "level": "a"},
        {"kind": "ranked", "order": ["a", "b"], "level": "c"},
        {"kind": "allow", "values": [1, 2]},
        {"kind": "budget", "limit": 3},
        {"kind": "cap", "limit": 3, "unit": "usd"},
        "cap",
    ],
)
def test_unknown_kinds_and_wrong_types_are_refused(body: Any) -> None:
    with pytest.raises(InvalidInput):
        ceiling_from_json(body)


def test_json_round_trip_and_immutability() -> None:
    again = Authority.from_json(TRIAGE.to_json())
    assert again == TRIAGE
    assert hash(again) == hash(TRIAGE)
    with pytest.raises(TypeError):
        TRIAGE.ceilings["spend"] = Cap(1)  # type: ignore[index]
    with pytest.raises(InvalidInput, match="unknown authority fields"):
        Authority.from_json({"scopes": [], "roles": ["admin"]})


# -- properties ----------------------------------------------------------------------

_segments = st.sampled_from(["billing", "kb", "infra", "read", "refund", "export"])
_scopes = st.builds(
    lambda parts, wild: ".".join(parts) + (".*" if wild else ""),
    st.lists(_segments, min_size=1, max_size=3),
    st.booleans(),
)
_ceilings: st.SearchStrategy[Ceiling] = st.one_of(
    st.builds(Cap, st.integers(-10, 100)),
    st.builds(lambda level: Ranked(EGRESS, level), st.sampled_from(EGRESS)),
    st.builds(lambda v: AllowList(frozenset(v)), st.sets(st.sampled_from("abcd"))),
    st.builds(lambda v: DenyList(frozenset(v)), st.sets(st.sampled_from("abcd"))),
    st.just(NOTHING),
)
_authorities = st.builds(
    lambda scopes, ceilings: Authority(frozenset(scopes), ceilings),
    st.sets(_scopes, max_size=4),
    st.dictionaries(st.sampled_from(["spend", "egress", "region"]), _ceilings, max_size=3),
)
_values = st.one_of(
    st.integers(-20, 120), st.sampled_from([*EGRESS, "a", "b", "e"]), st.none(), st.booleans()
)
_needed = st.one_of(_scopes, st.sampled_from(["billing.read", "kb.export", "infra.deploy"]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_authorities)
def test_meet_is_idempotent(a: Authority) -> None:
    assert meet(a, a) == a


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_authorities, _authorities)
def test_meet_is_commutative_and_below_both(a: Authority, b: Authority) -> None:
    m = meet(a, b)
    assert m == meet(b, a)
    assert m.is_narrower_than(a)
    assert m.is_narrower_than(b)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_authorities, _authorities, _needed, st.sampled_from(["spend", "egress", "region"]), _values)
def test_meet_permits_only_what_both_permit(
    a: Authority, b: Authority, needed: str, name: str, value: Any
) -> None:
    m = meet(a, b)
    if m.holds(needed):
        assert a.holds(needed)
        assert b.holds(needed)
    ceiling = m.ceilings.get(name)
    if ceiling is None or ceiling.permits(value):
        for side in (a, b):
            own = side.ceilings.get(name)
            assert own is None or own.permits(value)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_authorities, st.lists(_authorities, max_size=6), _needed, _values)
def test_no_chain_of_delegations_widens(
    root: Authority, requests: list[Authority], needed: str, value: Any
) -> None:
    chain = [root]
    for request in requests:
        chain.append(meet(chain[-1], request))
    last = chain[-1]
    assert last.is_narrower_than(root)
    assert reduce(meet, requests, root) == last
    if last.holds(needed):
        assert root.holds(needed)
    for name, ceiling in root.ceilings.items():
        if last.ceilings[name].permits(value):
            assert ceiling.permits(value)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_authorities, _authorities, _authorities)
def test_is_narrower_than_is_transitive(a: Authority, b: Authority, c: Authority) -> None:
    ab, bc = meet(a, b), meet(b, c)
    # Build chains that are narrower by construction, and random triples as well.
    assert meet(ab, c).is_narrower_than(ab)
    assert ab.is_narrower_than(a)
    assert meet(ab, c).is_narrower_than(a)
    if a.is_narrower_than(b) and b.is_narrower_than(c):
        assert a.is_narrower_than(c)
    if bc.is_narrower_than(a):
        assert meet(bc, c).is_narrower_than(a)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_authorities, _authorities)
def test_narrower_means_the_meet_changes_nothing(a: Authority, b: Authority) -> None:
    assert a.is_narrower_than(b) == (meet(b, a) == a)
    if excess(a, b) is None:
        granted = meet(b, a)
        assert granted.scopes == a.scopes
        assert all(granted.ceilings[name] == c for name, c in a.ceilings.items())


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_authorities, _values)
def test_nothing_denies_every_value(a: Authority, value: Any) -> None:
    poisoned = meet(a, Authority.of(spend=NOTHING))
    assert not poisoned.ceilings["spend"].permits(value)
