"""See a session: the web viewer (``agentjournal ui``) and the one-file export (``view``).

:mod:`agentjournal.ui.page` turns the read side's answers (``read_tree``, ``verify_records``,
``replay``, ``usage_of``, the catalog's rows) into page data and HTML, with no I/O;
:mod:`agentjournal.ui.app` serves them (Starlette, the ``[service]`` extra) and tells open
pages what changed (server-sent events from a store subscription). The pages draw
themselves from JSON embedded in them with one small script (``static/ui.js``) that
writes every stored value as text, never as markup.
"""

from __future__ import annotations
