"""``python -m agentjournal.cli``: the same as the ``agentjournal`` command."""

import sys

from agentjournal.cli import main

sys.exit(main())
