"""``python -m agentjournal.testing.kurrentdb_double``: serve a double, print its URI."""

from __future__ import annotations

import sys

from agentjournal.testing.kurrentdb_double.runner import main

if __name__ == "__main__":
    sys.exit(main())
