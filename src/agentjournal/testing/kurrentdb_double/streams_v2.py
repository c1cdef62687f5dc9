"""The double's v2 streams service: ``AppendSession``, the multi-stream append of KurrentDB
25.1 and later, with the server's order of checks and its answers."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    struct_pb2,
)
from kurrentdbclient.protos.v2.streams import streams_pb2 as v2_pb2
from kurrentdbclient.protos.v2.streams import streams_pb2_grpc as v2_pb2_grpc

from agentjournal.testing.kurrentdb_double.answers import (
    Answer,
    Rpc,
    v2,
)
from agentjournal.testing.kurrentdb_double.faults import Faults
from agentjournal.testing.kurrentdb_double.servicers import (
    EFFECTIVE_MAX_RECORD,
    SCHEMA_NAME,
    Limits,
    hold,
    property_text,
    size_on_disk,
)
from agentjournal.testing.kurrentdb_double.state import (
    ANY,
    EXISTS,
    NO_STREAM,
    Database,
    Proposed,
    StreamDeleted,
    Written,
    WrongExpectedVersion,
)


class StreamsV2(v2_pb2_grpc.StreamsServiceServicer):
    """The v2 streams service: atomic multi-stream appends (``AppendSession``).

    Source: ``src/KurrentDB.Api.V2/Modules/Streams/StreamsService.cs`` with its
    validators (``.../Streams/Validators/``) and ``AppendRecordExtensions.cs``.
    """

    def __init__(self, db: Database, limits: Limits, faults: Faults) -> None:
        self._db = db
        self._limits = limits
        self._faults = faults

    async def AppendSession(
        self,
        request_iterator: AsyncIterator[v2_pb2.AppendRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> v2_pb2.AppendSessionResponse:
        fault = self._faults.take("AppendSession")
        seen: set[str] = set()
        requests: list[Any] = []
        writes: list[tuple[str, int, list[Proposed]]] = []
        total = 0
        count = 0
        async for request in request_iterator:
            if request.ByteSize() > int(self._limits.max_append_size * 1.5):
                await Rpc.message_too_large().abort(context)  # ApiV2Plugin.cs
            await self._validate_request(request, context)
            folded = request.stream.casefold()
            if folded in seen:
                await v2.stream_already_in_append_session(request.stream).abort(context)
            seen.add(folded)
            events: list[Proposed] = []
            for record in request.records:
                proposed, size, on_disk = await self._preprocess(request.stream, record, context)
                if size > self._limits.max_append_event_size:
                    await v2.append_record_size_exceeded(
                        request.stream, proposed.id, size, self._limits.max_append_event_size
                    ).abort(context)
                total += size
                if total > self._limits.max_append_size:
                    await v2.append_transaction_size_exceeded(
                        count + 1, total, self._limits.max_append_size
                    ).abort(context)
                if on_disk > EFFECTIVE_MAX_RECORD:
                    # new Event(...) throws an ArgumentException nobody catches.
                    await Answer(grpc.StatusCode.UNKNOWN, "Exception was thrown by handler.").abort(
                        context
                    )
                count += 1
                events.append(proposed)
            requests.append(request)
            expected = request.expected_revision if request.HasField("expected_revision") else ANY
            writes.append((request.stream, expected, events))
        if not writes:
            await v2.append_session_no_requests().abort(context)
        if fault == "not_ready":
            await v2.server_not_ready().abort(context)
        if fault == "access_denied":
            await v2.access_denied("Append session").abort(context)
        if fault == "stall":
            await hold(context)
        try:
            written = self._db.write(writes)
        except WrongExpectedVersion as error:
            if not error.failures:
                # MapToError indexes an empty failure list; ApiCallback reports the throw.
                reason = "Index was outside the bounds of the array."
                await v2.internal_server_error(
                    f"Append session failed to map error: {reason}", exception=reason
                ).abort(context)
            failure = error.failures[0]
            culprit = requests[failure.index]
            await v2.stream_revision_conflict(
                culprit.stream, culprit.expected_revision, failure.current
            ).abort(context)
        except StreamDeleted as error:
            await v2.stream_tombstoned(requests[error.index].stream).abort(context)
        if fault == "stall_after_commit":
            await hold(context)
        if fault == "timeout_after_commit":
            await v2.operation_timeout("Append session timed out while waiting for commit").abort(
                context
            )
        return self._response(written)

    @staticmethod
    def _response(written: list[Written]) -> v2_pb2.AppendSessionResponse:
        positions = [result.position for result in written]
        position = -1 if any(p is None for p in positions) else max(p or 0 for p in positions)
        return v2_pb2.AppendSessionResponse(
            # MapToResult sets the stream and its revision; no per-stream position.
            output=[
                v2_pb2.AppendResponse(stream=result.stream, stream_revision=result.revision)
                for result in written
            ],
            position=position,
        )

    async def _validate_request(
        self, request: v2_pb2.AppendRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """AppendRequestValidator, run by the request-validation interceptor."""
        failures: list[tuple[str, str]] = []
        if not request.stream:
            failures.append(("Stream", "Stream must not be empty."))
        elif request.stream == "$$":
            failures.append(("Stream", "Stream must not be '$$'."))
        expected = request.expected_revision
        if request.HasField("expected_revision") and not (
            expected >= 0 or expected in (ANY, NO_STREAM, EXISTS)
        ):
            failures.append(
                (
                    "ExpectedRevision",
                    "Expected revision must be positive or one of the allowed constants: "
                    "NoStream (-1), Any (-2) or Exists (-4).",
                )
            )
        if not request.records:
            failures.append(("Records", "Stream append request must contain at least one record"))
        if failures:
            await v2.invalid_request(failures).abort(context)

    async def _preprocess(
        self, stream: str, record: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tuple[Proposed, int, int]:
        """PreProcessRecord (id, properties, validation), then its sizes.

        Returns the record, its size as the append limits count it
        (``CalculateSizeOnDisk``) and as the stored event counts it (``Event.SizeOnDisk``).
        """
        record_id = record.record_id if record.HasField("record_id") else str(uuid.uuid4())
        properties = dict(record.properties.items())
        is_json = record.schema.format == v2_pb2.SCHEMA_FORMAT_JSON
        format_name = v2_pb2.SchemaFormat.Name(record.schema.format)
        format_name = format_name.removeprefix("SCHEMA_FORMAT_").title()
        if not is_json:
            properties["$schema.format"] = struct_pb2.Value(string_value=format_name)
        failures: list[tuple[str, str]] = []
        try:
            parsed = uuid.UUID(record_id)
        except ValueError:
            parsed = None
        if parsed is None or parsed.int == 0:
            failures.append(("RecordId", "Record ID must be a valid and non-empty UUID."))
        name = record.schema.name
        if not name:
            failures.append(("Schema.Name", "Schema name must not be empty."))
        elif not SCHEMA_NAME[self._db.server_version].fullmatch(name.removesuffix("\n")):
            # .NET's $ also matches before a final newline, so "Type\n" passes there.
            failures.append(
                (
                    "Schema.Name",
                    "Schema name can only contain alphanumeric characters, underscores, dashes, "
                    f"periods, colons, and dollar signs. Attempted Value: {name}",
                )
            )
        if any(not key for key in properties):
            failures.append(("Properties", "Property keys must not be empty."))
        if failures:
            await v2.invalid_request(failures).abort(context)
        metadata_bytes = struct_pb2.Struct(fields=properties).SerializeToString()
        size = len(record.data) + len(metadata_bytes) + len(name.encode())
        # The server stores the properties and synthesises this JSON on read.
        read_back = {key: property_text(value) for key, value in properties.items()}
        read_back["$schema.name"] = name
        read_back.setdefault("$schema.format", format_name)
        proposed = Proposed(
            id=str(parsed),
            type=name,
            content_type="application/json" if is_json else "application/octet-stream",
            data=bytes(record.data),
            metadata=json.dumps(read_back, separators=(",", ":"), ensure_ascii=False).encode(),
        )
        return proposed, size, size_on_disk(name, bytes(record.data), metadata_bytes)
