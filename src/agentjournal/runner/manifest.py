"""The ``agent.yml`` manifest of seed 000, as strict pydantic models, and loading a directory.

Every property the seed lists is mandatory and nothing else is accepted:
``schema_version`` is exactly ``"1.0"``, ``id`` is reverse-DNS
(``io.clawpedia.agents.jira-ticket-manager``), ``version`` is a semantic
version, ``model.provider`` is exactly ``"openai"``, and every tool is
``type: function`` with a JSON-schema ``parameters`` object
(``type: object``, ``properties``, ``required`` naming only declared
properties). One property beyond the seed's is accepted: a tool's optional
``needs_approval: true`` (default false), which stops the run before the tool's body
runs until a person approves the call (the invocation answers ``interrupted``). An
error names the file, the field and what was expected.

A directory of manifests is every file named ``agent.yml`` below it; the pair
(``id``, ``version``) is unique across it. An id with several versions runs its
highest version (``--agent ID@VERSION`` picks another).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentjournal._yaml import parse_yaml
from agentjournal.errors import InvalidInput

MANIFEST_FILE = "agent.yml"
RESERVED_TOOL_NAMES = frozenset({"system::handoff", "system__handoff", "system__handoff_rejected"})
"""Names the runner owns (the handoff tool, in both spellings): no manifest may declare them."""

_REVERSE_DNS = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)+")
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
)
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a function name


class ManifestError(InvalidInput):
    """Raised when a manifest or a directory of manifests is not valid; names file and field."""


class _Strict(BaseModel):
    # Every field is mandatory (no defaults) and nothing undeclared is accepted.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Parameters(_Strict):
    """A tool's ``parameters``: a JSON-schema object with ``properties`` and ``required``."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)  # other JSON-schema keys
    type: Literal["object"]
    properties: dict[str, dict[str, Any]]
    required: list[str]

    @model_validator(mode="after")
    def _valid_schema(self) -> Parameters:
        unknown = [name for name in self.required if name not in self.properties]
        if unknown:
            raise ValueError(f"required names undeclared properties {unknown}")
        schema = self.schema_dict()
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            raise ValueError(f"not a valid JSON schema: {error.message}") from None
        _check_references(schema)
        return self

    def schema_dict(self) -> dict[str, Any]:
        """The JSON schema as a plain dict (what the model is offered, what arguments must fit)."""
        return self.model_dump(mode="json")


_REFERENCE_KEYS = ("$ref", "$dynamicRef")


def _references(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every ``$ref``/``$dynamicRef`` string below ``node``, with its path in the schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key in _REFERENCE_KEYS and isinstance(value, str):
                yield where, value
            else:
                yield from _references(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _references(value, f"{path}.{index}")


def _check_references(schema: dict[str, Any]) -> None:
    """Only references inside the schema (``#...``), each resolving, are allowed.

    A tool's arguments are validated against the schema during a run: a reference
    to a URL or a file would be fetched then (or fail then, as ``Unresolvable``),
    so it is refused here, and a local one is resolved here to prove it resolves.
    """
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resolver = None
    for where, reference in _references(schema, ""):
        if not reference.startswith("#"):
            raise ValueError(
                f"{where}: {reference!r} is not a reference inside the schema; only local "
                "references ('#/$defs/...') are allowed"
            )
        if resolver is None:
            # The schema as its own root, under a base no reference can leave.
            resource = Resource.from_contents(schema, default_specification=DRAFT202012)
            resolver = (
                Registry()
                .with_resource("urn:agentjournal:tool", resource)
                .resolver(base_uri="urn:agentjournal:tool")
            )
        try:
            resolver.lookup(reference)
        except Unresolvable:
            raise ValueError(f"{where}: {reference!r} does not resolve in the schema") from None


class FunctionSpec(_Strict):
    """An OpenAI Function Object: ``name``, ``description``, ``parameters``."""

    name: str
    description: str
    parameters: Parameters

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if _FUNCTION_NAME.fullmatch(value) is None:
            raise ValueError("expected 1-64 ASCII letters, digits, '_' or '-' (an OpenAI name)")
        if value in RESERVED_TOOL_NAMES:
            raise ValueError(f"{value!r} is the runner's handoff tool; it cannot be declared")
        return value


class ToolSpec(_Strict):
    """One entry of ``tools``: always ``type: function``; ``needs_approval: true`` makes
    each call wait for a person's approval (default false)."""

    type: Literal["function"]
    function: FunctionSpec
    needs_approval: bool = False


class ModelSpec(_Strict):
    """``model``: the provider (exactly ``openai``) and the model's name."""

    provider: Literal["openai"]
    name: str = Field(min_length=1)


class Manifest(_Strict):
    """One ``agent.yml``."""

    schema_version: Literal["1.0"]
    id: str
    version: str
    name: str = Field(min_length=1)
    instructions: str
    model: ModelSpec
    tools: list[ToolSpec]

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if len(value) > 128 or _REVERSE_DNS.fullmatch(value) is None:
            raise ValueError(
                "expected a reverse-DNS id of lowercase labels, "
                "e.g. io.clawpedia.agents.email-sender"
            )
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if _SEMVER.fullmatch(value) is None:
            raise ValueError("expected a semantic version such as 1.2.3")
        return value

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected the agent's instructions (a non-empty string)")
        return value

    @model_validator(mode="after")
    def _unique_tools(self) -> Manifest:
        names = Counter(tool.function.name for tool in self.tools)
        twice = sorted(name for name, count in names.items() if count > 1)
        if twice:
            raise ValueError(f"tools: names declared twice {twice}")
        return self

    @property
    def key(self) -> str:
        """``id@version``."""
        return f"{self.id}@{self.version}"


@dataclass(frozen=True)
class Catalog:
    """The manifests of a directory, by id (each id's versions, highest last).

    Attributes:
        root: The directory.
        versions: Each id's manifests, lowest version first.
        files: Each manifest's file, by ``id@version``.
    """

    root: Path
    versions: dict[str, list[Manifest]]
    files: dict[str, Path]

    def ids(self) -> list[str]:
        """Every agent id, sorted (the handoff tool's enum)."""
        return sorted(self.versions)

    def __iter__(self) -> Iterator[Manifest]:
        for agent_id in self.ids():
            yield from self.versions[agent_id]

    def resolve(self, reference: str) -> Manifest:
        """The manifest ``ID`` (its highest version) or ``ID@VERSION``.

        Raises:
            ManifestError: No manifest has that id (or version).
        """
        agent_id, _, version = reference.partition("@")
        found = self.versions.get(agent_id)
        if not found:
            raise ManifestError(
                f"no manifest has id {agent_id!r} in {self.root} (known: {', '.join(self.ids())})"
            )
        if not version:
            return found[-1]
        for manifest in found:
            if manifest.version == version:
                return manifest
        versions = ", ".join(manifest.version for manifest in found)
        raise ManifestError(f"{agent_id} has no version {version!r} (known: {versions})")

    def file_of(self, manifest: Manifest) -> Path:
        """The file ``manifest`` was read from."""
        return self.files[manifest.key]


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and check one ``agent.yml``.

    Raises:
        ManifestError: The file cannot be read, is not YAML, or breaks the schema; the
            message names the file, the field and what was expected.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: cannot read the manifest: {error}") from None
    try:
        document = parse_yaml(text)
    except InvalidInput as error:
        raise ManifestError(f"{path}: {error}") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: expected a mapping of the manifest's fields")
    try:
        return Manifest.model_validate(document)
    except ValidationError as error:
        raise ManifestError(f"{path}: {_first_problem(error)}") from None


def load_catalog(root: str | os.PathLike[str]) -> Catalog:
    """Read every ``agent.yml`` below ``root``.

    Raises:
        ManifestError: ``root`` is no directory or holds no manifest, a manifest is
            invalid, or two manifests share an ``id`` and ``version``.
    """
    root = Path(root)
    if not root.is_dir():
        raise ManifestError(f"{root}: no such directory of manifests")
    versions: dict[str, list[Manifest]] = {}
    files: dict[str, Path] = {}
    for path in sorted(root.rglob(MANIFEST_FILE)):
        manifest = load_manifest(path)
        if manifest.key in files:
            raise ManifestError(
                f"{path}: id {manifest.id!r} version {manifest.version!r} is already declared "
                f"by {files[manifest.key]}; the pair must be unique"
            )
        files[manifest.key] = path
        versions.setdefault(manifest.id, []).append(manifest)
    if not files:
        raise ManifestError(f"{root}: no {MANIFEST_FILE} below this directory")
    for found in versions.values():
        found.sort(key=lambda manifest: _version_key(manifest.version))
    return Catalog(root, versions, files)


def _version_key(version: str) -> tuple[int, int, int, int, str]:
    """Semantic-version precedence (a pre-release sorts before its release)."""
    core, _, pre = version.partition("+")[0].partition("-")
    major, minor, patch = (int(part) for part in core.split("."))
    return (major, minor, patch, 0 if pre else 1, pre)


def _first_problem(error: ValidationError) -> str:
    """The first problem of a validation error: field path, what was expected, what was found."""
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"]) or "(document)"
    kind = problem["type"]
    if kind == "missing":
        return f"field {field}: missing (every property of agent.yml is mandatory)"
    if kind == "extra_forbidden":
        return f"field {field}: not a property of agent.yml schema 1.0"
    message = str(problem["msg"]).removeprefix("Value error, ")
    found = problem.get("input")
    shown = repr(found) if isinstance(found, str | int | float | bool) or found is None else ""
    return f"field {field}: {message}" + (f" (got {shown[:80]})" if shown else "")
