"""Tool implementations bound by name, arguments checked against the declared schema first.

Where implementations come from (the operator names them; later sources win a name):

1. the ``agentjournal.tools`` entry-point group: an entry point's object is a
   module (its public functions, by name) or a callable (bound as the entry
   point's name);
2. each ``--tools MODULE_OR_FILE``, in order: a dotted module path, or a ``.py``
   file — its public functions (names not starting with ``_``) by name.

A tool a manifest declares with no implementation is refused when the manifests
are loaded, naming the tool, the agent and the file. When the model calls a tool,
its arguments must be a JSON object that fits the tool's declared ``parameters``
schema before the body runs; otherwise the model gets an error output (the call
and that output are recorded like any other).

A body receives the arguments as keyword arguments; it may be sync (it runs in a
worker thread) or async. It runs inside its own span (``agentjournal.tool_body
NAME``, in the invocation's trace), so the clients of
:mod:`agentjournal.runner.toolkit` send that span's ``traceparent``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
from agents.tool import FunctionTool
from agents.tool_context import ToolContext
from opentelemetry import trace

from agentjournal._modules import load_file
from agentjournal.errors import InvalidInput
from agentjournal.runner import toolkit
from agentjournal.runner.manifest import Catalog, Manifest, ToolSpec
from agentjournal.sdk import tracing

ENTRY_POINT_GROUP = "agentjournal.tools"

logger = logging.getLogger("agentjournal.runner")


class Registry:
    """Tool implementations by name, and where each came from (for messages)."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.origins: dict[str, str] = {}
        self.sources: list[str] = []

    def add_module(self, module: ModuleType, origin: str) -> None:
        """Every public function of ``module`` (defined there, not imported into it)."""
        self.sources.append(origin)
        for name, value in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(value):
                continue
            if getattr(value, "__module__", None) != module.__name__:
                continue
            self.functions[name] = value
            self.origins[name] = origin

    def add(self, name: str, function: Callable[..., Any], origin: str) -> None:
        """One implementation under ``name``."""
        self.sources.append(origin)
        self.functions[name] = function
        self.origins[name] = origin


def load_registry(specs: list[str], *, entry_points_too: bool = True) -> Registry:
    """The implementations of the ``agentjournal.tools`` entry points and each ``--tools``.

    Raises:
        InvalidInput: A module or file cannot be found or imported (one line naming it).
    """
    registry = Registry()
    if entry_points_too:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = point.load()
            except Exception as error:
                raise InvalidInput(
                    f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP}) "
                    f"cannot be loaded: {type(error).__name__}: {error}"
                ) from None
            if isinstance(loaded, ModuleType):
                registry.add_module(loaded, f"entry point {point.name}")
            elif callable(loaded):
                registry.add(point.name, loaded, f"entry point {point.name}")
    for spec in specs:
        registry.add_module(_import(spec), spec)
    return registry


def _import(spec: str) -> ModuleType:
    if spec.endswith(".py") or "/" in spec or Path(spec).is_file():
        path = Path(spec).resolve()
        if not path.is_file():
            raise InvalidInput(f"--tools {spec}: no such file")
        return load_file(path, "agentjournal_tools", f"--tools {spec}")
    try:
        return importlib.import_module(spec)
    except ImportError as error:
        raise InvalidInput(f"--tools {spec}: no such module ({error})") from None


def check_bindings(catalog: Catalog, registry: Registry) -> None:
    """Refuse a declared tool without an implementation, naming it, its agent and file.

    Raises:
        InvalidInput: One tool of some manifest has no implementation.
    """
    for manifest in catalog:
        for tool in manifest.tools:
            name = tool.function.name
            if name not in registry.functions:
                looked = ", ".join(registry.sources) or "nothing: pass --tools MODULE_OR_FILE"
                raise InvalidInput(
                    f"{catalog.file_of(manifest)}: tool {name!r} of {manifest.id} has no "
                    f"implementation (looked in {looked})"
                )


def bind_tools(manifest: Manifest, registry: Registry) -> list[FunctionTool]:
    """The SDK tools of ``manifest``: the declared schema, the bound body, arguments checked."""
    return [_bind(tool, registry.functions[tool.function.name]) for tool in manifest.tools]


def _bind(spec: ToolSpec, function: Callable[..., Any]) -> FunctionTool:
    name = spec.function.name
    schema = spec.function.parameters.schema_dict()
    validator = jsonschema.Draft202012Validator(schema)

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            return f"Error: the arguments of {name} are not JSON ({error.msg})"
        if not isinstance(parsed, dict):
            return f"Error: the arguments of {name} must be a JSON object"
        problem = next(iter(validator.iter_errors(parsed)), None)
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path) or "(arguments)"
            return (
                f"Error: the arguments of {name} do not fit its schema at {where}: "
                f"{problem.message}"
            )
        span = tracing.start_span(f"agentjournal.tool_body {name}", attributes={"tool": name})
        try:
            with trace.use_span(span, end_on_exit=False):
                if inspect.iscoroutinefunction(function):
                    result = await function(**parsed)
                else:
                    result = await asyncio.to_thread(function, **parsed)
                text = result if isinstance(result, str) else json.dumps(result, default=str)
        except Exception as error:
            # An error output the model sees, as the SDK's failure_error_function does: the
            # model may retry or explain, the call and its output are on the record, and
            # the run goes on. Its text is scrubbed: an HTTP error names the URL it called,
            # which may come from config (the span gets the scrubbed line, not the error).
            problem = toolkit.scrubber().error_line(error)
            tracing.end_span(span, problem)
            logger.warning("tool %s failed: %s", name, problem)
            return f"Error: the tool {name} failed: {problem}"
        tracing.end_span(span)
        return toolkit.scrub(text)

    return FunctionTool(
        name=name,
        description=spec.function.description,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,  # the manifest's schema is offered as declared
        needs_approval=spec.needs_approval,
    )
