"""``agentjournal guardrail serve``: the reference guardrail service (``POST /v1/validate``)."""

from __future__ import annotations

import sys

from agentjournal._text import plural
from agentjournal.cli._common import Commands, missing_service, usage

__all__ = ["register"]


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
    serve.set_defaults(run=lambda args: _serve(args.host, args.port, args.rules))


def _serve(host: str, port: int, rules_file: str | None) -> int:
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

    serve(rules, host=host, port=port, ready=ready)
    return 0
