"""The public surface: what ``agentjournal`` exports, and that it imports cheaply."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentjournal


def test_every_exported_name_resolves() -> None:
    for name in agentjournal.__all__:
        assert getattr(agentjournal, name) is not None, name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        agentjournal.NoSuchThing  # noqa: B018


def test_store_import_does_not_load_the_sdk() -> None:
    probe = "import sys, agentjournal, agentjournal.store; print('agents' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
