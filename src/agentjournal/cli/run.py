"""``agentjournal run``: one invocation of a manifest's agent, seed 000's stdin/stdout contract.

stdin: one JSON object (``thread_id``, ``run_id``, ``input_message``, ``state``,
``config``, ``trace``). stdout: exactly one JSON object, whatever happens
(``status`` completed / interrupted / blocked / failed, or an ``error`` for input that
was refused before anything ran). stderr: JSON lines only, each with ``trace_id``
and ``span_id``. Exit codes: 0 completed, 1 invalid input, manifests, tools or
options (nothing written; a command line ``run`` cannot use, or a store that cannot
be opened, too), 2 blocked, 3 failed, 4 interrupted (tool calls wait for a person's
approval: answer them with ``approvals`` in the next invocation's input).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from agentjournal.cli._common import STORE_HELP, Commands, check_guardrails

if TYPE_CHECKING:
    from agentjournal.runner.contract import InvocationInput
    from agentjournal.runner.scrub import Scrubber

_LOG_KEYS = ("thread_id", "run_id")


def register(commands: Commands) -> None:
    """Add the ``run`` command."""
    text = (
        "run a manifest's agent: one JSON object on stdin, one on stdout (seed 000); "
        "exit 0 completed, 1 invalid (nothing written), 2 blocked, 3 failed, "
        "4 interrupted (waits for approval)"
    )
    run = commands.add(
        "run",
        text,
        "agentjournal run --manifests samples/manifests --agent "
        "io.clawpedia.agents.jira-ticket-manager --tools samples/manifests/tools.py "
        "--model-script samples/manifests/script.yml < request.json",
    )
    run.add_argument("--manifests", required=True, help="the directory of agent.yml files")
    run.add_argument("--agent", required=True, help="the agent to run: ID or ID@VERSION")
    run.add_argument("--uri", help=STORE_HELP)
    run.add_argument(
        "--guardrails",
        help="the guardrail service's base URL (default: $AGENTJOURNAL_GUARDRAIL_URL, else none)",
    )
    run.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="tool implementations: a module or a .py file, repeatable (default: only the "
        "agentjournal.tools entry points)",
    )
    run.add_argument(
        "--model-script",
        help="scripted model answers per agent id (YAML or JSON); default: each manifest's "
        "model.name on OpenAI with $OPENAI_API_KEY",
    )
    run.set_defaults(run=_run)
    # The contract answers every failure with one JSON object on stdout, a bad command line
    # too (argparse would print its usage on stderr and exit 2): this parser's errors, and
    # arguments it does not know (else left to the top-level parser), become that object.
    parse_known = run.parse_known_args

    def parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = parse_known(args, namespace)
        if extras:
            run.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    run.parse_known_args = parse_known_args  # type: ignore[assignment,method-assign]
    run.error = _usage_error  # type: ignore[method-assign]


def _usage_error(message: str) -> NoReturn:
    """A command line ``run`` cannot use: the contract's error object, exit 1."""
    raise SystemExit(_refuse("INVALID_SETUP", f"agentjournal run: {message}"))


class _JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, trace and span ids.

    Every text is scrubbed of the invocation's config values (any logger may quote one).
    """

    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__()
        self._scrubber = scrubber

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", ""),
            "span_id": getattr(record, "span_id", ""),
        }
        for key in _LOG_KEYS:
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = record.exc_info[0].__name__
        scrub = self._scrubber.scrub
        return json.dumps(
            {key: scrub(value) if isinstance(value, str) else value for key, value in line.items()},
            ensure_ascii=False,
        )


def _configure_logging(scrubber: Scrubber) -> None:
    from agentjournal.sdk.trace_context import TraceLogFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines(scrubber))
    handler.addFilter(TraceLogFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # Request lines name URLs (a tool's endpoint may come from config): not logged.
    for noisy in ("httpx", "httpcore", "openai", "openai.agents"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _refuse(code: str, message: str, request: InvocationInput | None = None) -> int:
    """The one output object of an invocation refused before anything ran; its exit code (1).

    ``request`` (the parsed input, once it is known) gives its thread and run ids.
    """
    from agentjournal.runner.contract import ERROR_CODES, ErrorInfo, InvocationOutput
    from agentjournal.runner.scrub import Scrubber

    scrubber = Scrubber(request.config if request is not None else {})
    output = InvocationOutput(
        thread_id=getattr(request, "thread_id", None),
        run_id=getattr(request, "run_id", None),
        status="failed",
        response=None,
        agent_id=None,
        state={},
        handoffs=[],
        approvals=[],
        trace=None,
        error=ErrorInfo(
            code=code, message=scrubber.scrub(" ".join(scrubber.scrub(message).split()))
        ),
    )
    print(output.to_json(), flush=True)
    return ERROR_CODES[code]


def _run(args: argparse.Namespace) -> int:
    from agentjournal.errors import InvalidInput

    # The whole of stdin is read and checked first, with light imports only: a refusal
    # is quick, and it writes nothing (the store is opened only for a valid invocation).
    from agentjournal.runner.contract import MAX_STDIN_BYTES, parse_input

    try:
        # One byte over the limit is enough to refuse; the rest is never read.
        request = parse_input(sys.stdin.buffer.read(MAX_STDIN_BYTES + 1))
    except InvalidInput as error:
        return _refuse("INVALID_INPUT", str(error))
    from agentjournal.runner.scrub import Scrubber

    _configure_logging(Scrubber(request.config))
    from agentjournal.sdk.trace_context import continue_trace

    # From here every log line carries the input's trace (the parent span's id until the
    # invocation's root span starts).
    with continue_trace(*request.trace.header()):
        return _invoke(args, request)


def _invoke(args: argparse.Namespace, request: InvocationInput) -> int:
    """Everything after the input was accepted: manifests, tools, script, the run."""
    from agentjournal.errors import InvalidInput, JournalError
    from agentjournal.runner.manifest import ManifestError, load_catalog

    logger = logging.getLogger("agentjournal.runner")
    # The manifests first, with light imports only: a wrong directory or agent is
    # refused before the Agents SDK is loaded.
    try:
        catalog = load_catalog(args.manifests)
        first = catalog.resolve(args.agent)
    except ManifestError as error:
        return _refuse("INVALID_MANIFEST", str(error), request)
    logger.info("loading the Agents SDK and the tools")
    from agentjournal.runner import run as running
    from agentjournal.runner.script import load_script
    from agentjournal.runner.tools import check_bindings, load_registry

    try:
        check_guardrails(args.guardrails)
        registry = load_registry(args.tools)
        check_bindings(catalog, registry)
        script = (
            load_script(args.model_script, known=set(catalog.ids())) if args.model_script else None
        )
    except ManifestError as error:
        return _refuse("INVALID_MANIFEST", str(error), request)
    except InvalidInput as error:
        return _refuse("INVALID_SETUP", str(error), request)
    if script is None and not os.environ.get("OPENAI_API_KEY"):
        return _refuse(
            "INVALID_SETUP",
            "no --model-script and no $OPENAI_API_KEY: the manifests' models cannot be called",
            request,
        )
    for manifest, other in running.hardcoded_ids(catalog):
        logger.warning(
            "%s names agent id %s in its instructions: routing belongs to system::handoff, "
            "whose schema lists the known ids",
            manifest.id,
            other,
        )
    setup = running.Invocation(
        catalog=catalog,
        registry=registry,
        agent=first.key,
        uri=args.uri,
        guardrails=args.guardrails,
        script=script,
    )
    try:
        output = asyncio.run(running.invoke(setup, request))
    except running.ApprovalsRefused as error:  # the answers do not fit what the thread waits for
        return _refuse("INVALID_INPUT", str(error), request)
    except InvalidInput as error:  # --uri names no store this runner knows
        return _refuse("INVALID_SETUP", f"--uri: {error}", request)
    except (JournalError, OSError) as error:  # the store could not be opened or read
        return _refuse("STORE_UNAVAILABLE", f"{type(error).__name__}: {error}", request)
    print(output.to_json(), flush=True)
    return running.EXIT_CODES[output.status]
