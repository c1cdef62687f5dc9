"""Run the ``agentjournal`` command line in this process, capturing what it prints."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass

from agentjournal.cli import main


@dataclass
class Ran:
    """What one command returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str, env: dict[str, str] | None = None) -> Ran:
    """``agentjournal ARGS`` through ``main`` (the same code as the console script).

    ``$AGENTJOURNAL_*`` settings of the surrounding environment are removed, then ``env``
    is added, for the call only.
    """
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    for name in [name for name in os.environ if name.startswith("AGENTJOURNAL_")]:
        del os.environ[name]
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = int(exit_.code or 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Ran(code, out.getvalue(), err.getvalue())


def on_a_terminal(*args: str) -> str:
    """What ``agentjournal ARGS`` prints to a terminal (a pseudo-terminal, 120 columns)."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    done = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        stdout=child,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
        env={**env, "TERM": "xterm-256color"},
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert done.returncode == 0, done.stderr
    return b"".join(chunks).decode()
