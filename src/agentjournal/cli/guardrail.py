"""``agentjournal guardrail serve``: the reference guardrail service (``POST /v1/validate``)."""

from __future__ import annotations

import signal
import sys

from agentjournal._text import plural
from agentjournal.cli._common import Commands, missing_service, usage


def register(commands: Commands) -> None:
    """Add the ``guardrail`` command and its ``serve``."""
    text = "the reference guardrail service"
    subcommands = commands.group("guardrail", text)
    text = "serve POST /v1/validate until interrupted"
    serve = subcommands.add(
        "serve", text, "agentjournal guardrail serve --port 0 --rules samples/guardrail-rules.yml"
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8787, help="the port; 0 picks a free one (default: 8787)"
    )
    serve.add_argument(
        "--rules",
        metavar="FILE",
        help="YAML rules, e.g. samples/guardrail-rules.yml (default: PII redaction only)",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=256 * 1024,
        metavar="BYTES",
        help="refuse a larger request body with 413 before reading it (default: 262144)",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="answer 408 to a client slower to send its body, at most a day (default: 10)",
    )
    serve.set_defaults(
        run=lambda args: _serve(args.host, args.port, args.rules, args.max_body, args.read_timeout)
    )


def _serve(host: str, port: int, rules_file: str | None, max_body: int, read_timeout: float) -> int:
    if not 0 <= port <= 65535:
        return usage(f"--port must be 0 to 65535, got {port}")
    try:
        from agentjournal.guardrails.rules import load_rules
        from agentjournal.guardrails.service import serve
    except ImportError as error:
        return missing_service(error, "the reference guardrail service needs its extra")

    text = "rules: [{kind: redact_pii}]"
    if rules_file is not None:
        try:
            with open(rules_file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            return usage(f"cannot read rules {rules_file}: {error.strerror or error}")
        except UnicodeDecodeError:
            return usage(f"cannot read rules {rules_file}: not UTF-8 text")
    try:
        rules = load_rules(text)
    except ValueError as error:
        return usage(f"invalid rules in {rules_file}: {error}")
    count = len(rules.rules)

    def ready(url: str) -> None:
        # Flushed: a caller reading our stdout through a pipe learns the port at once.
        print(f"reference guardrail on {url}/v1/validate ({plural(count, 'rule')})")
        sys.stdout.flush()

    # uvicorn shuts down on SIGINT or SIGTERM and raises the signal again: as
    # KeyboardInterrupt both times here, so Ctrl-C and a service manager's stop exit 0.
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        serve(
            rules, host=host, port=port, ready=ready, max_body=max_body, read_timeout=read_timeout
        )
    except KeyboardInterrupt:
        print("reference guardrail: stopped", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupted(number: int, frame: object) -> None:
    raise KeyboardInterrupt
