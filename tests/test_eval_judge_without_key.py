"""A scorers file whose judge names a model no key can call is refused when it is read, so
an eval run or an experiment never starts (and is never left open) for want of a key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers import load_scorers


def test_a_model_judge_without_a_key_is_refused_when_the_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "scorers.yml"
    path.write_text("scorers:\n  - {name: helpful, judge: Is it helpful, model: gpt-4.1-mini}\n")
    with pytest.raises(InvalidInput, match=r"helpful.*gpt-4\.1-mini cannot be called: no "):
        load_scorers(path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (judge,) = load_scorers(path)
    assert judge.describe()["model"] == "gpt-4.1-mini"
