"""Scorers: what judges a turn or a session line, and the scorers file that names them."""

from agentjournal.evals.scorers.base import Score as Score
from agentjournal.evals.scorers.base import Scorer as Scorer
from agentjournal.evals.scorers.file import load_scorers as load_scorers
