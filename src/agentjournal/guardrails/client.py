"""The guardrail client: asks ``/v1/validate`` and never fails open by accident.

:meth:`GuardrailClient.validate` always returns a :class:`Verdict`. A usable
answer becomes its decision; every fault — timeout, connection refused, HTTP
5xx or 429, another status, a wrong content type, an oversized or malformed
body, a reply for another ``action_id``, an unknown decision, a MODIFY without
(or with an unfitting) payload — becomes a BLOCK with a machine-readable
``reason_code`` (:class:`~agentjournal.guardrails.protocol.ReasonCode`).
Failing open is possible only with ``fail_open=True``, which is logged loudly
at construction and at every fault.

One budget (``timeout``) covers the whole exchange of one action: connect,
send, wait and read.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
from pydantic import ValidationError

from agentjournal.errors import InvalidInput
from agentjournal.guardrails.protocol import (
    ActionType,
    Decision,
    ReasonCode,
    TraceRef,
    ValidateRequest,
    ValidateResponse,
    traceparent,
)

logger = logging.getLogger("agentjournal.guardrails")

DEFAULT_TIMEOUT: Final = 2.0
DEFAULT_MAX_BODY: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one validation: what the guardrail decided, or why the runner blocked.

    Attributes:
        action_id: The id sent (uuid4).
        action_type: What was validated.
        decision: ALLOW, BLOCK or MODIFY — BLOCK for every fault unless the
            client fails open.
        reason_code: The guardrail's code, or a :class:`ReasonCode` of the runner.
        reason_message: Human-readable reason.
        payload: The payload that was validated.
        modified_payload: The replacement, for MODIFY.
        latency_ms: Time from sending to deciding.
        trace: The trace context sent.
        fault: True when the runner decided because the guardrail gave no usable answer.
    """

    action_id: str
    action_type: ActionType
    decision: Decision
    reason_code: str | None
    reason_message: str | None
    payload: Any
    modified_payload: Any
    latency_ms: float
    trace: TraceRef
    fault: bool = False

    @property
    def allowed(self) -> bool:
        """True for ALLOW and MODIFY: the action may go ahead (with :attr:`effective_payload`)."""
        return self.decision is not Decision.BLOCK

    @property
    def effective_payload(self) -> Any:
        """The payload to act on: the modified one for MODIFY, else the original."""
        return self.modified_payload if self.decision is Decision.MODIFY else self.payload


def _fits(payload: Any, fits: Callable[[Any], bool] | None) -> bool:
    """A MODIFY's payload is usable: present, and accepted by the caller's check."""
    if payload is None:
        return False
    if fits is None:
        return True
    try:
        return bool(fits(payload))
    except Exception:  # a check that breaks does not let the payload through
        return False


class _Fault(Exception):
    def __init__(self, code: ReasonCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_base_url(base_url: str) -> None:
    """Raise unless ``base_url`` can be a guardrail service's base URL.

    Raises:
        InvalidInput: It is not http(s).
    """
    if not base_url.startswith(("http://", "https://")):
        raise InvalidInput(f"guardrail base URL must be http(s), got {base_url!r}")


class GuardrailClient:
    """Validates actions against a guardrail service over HTTP.

    Args:
        base_url: The service, e.g. ``http://127.0.0.1:8787``.
        timeout: Seconds one validation may take in all.
        max_body_bytes: The largest response body accepted.
        fail_open: Let faults through as ALLOW (recorded with reason
            ``GUARDRAIL_FAILED_OPEN``). Off by default; logged loudly when on.
        headers: Extra headers for every request (e.g. an API key).

    Raises:
        InvalidInput: The URL is not http(s), or the timeout or body limit is not positive.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        fail_open: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        check_base_url(base_url)
        if timeout <= 0:
            raise InvalidInput(f"timeout must be positive, got {timeout!r}")
        if max_body_bytes <= 0:
            raise InvalidInput(f"max_body_bytes must be positive, got {max_body_bytes!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.fail_open = fail_open
        self._http = httpx.AsyncClient(headers=headers or {}, timeout=timeout)
        if fail_open:
            logger.warning(
                "guardrail client for %s FAILS OPEN: when the service cannot answer, actions "
                "are allowed. Use this only where an unchecked action is acceptable.",
                self.base_url,
            )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> GuardrailClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def validate(
        self,
        action_type: ActionType,
        payload: Any,
        *,
        source_agent_id: str,
        thread_id: str,
        trace: TraceRef,
        tracestate: str | None = None,
        fits: Callable[[Any], bool] | None = None,
    ) -> Verdict:
        """Ask the guardrail about one action; never raises for a guardrail fault.

        Args:
            action_type: What is validated.
            payload: Shaped per action type (see the module docs of the session wiring).
            source_agent_id: The agent that acts.
            thread_id: The session id.
            trace: The current span's trace context (sent in the body and as
                ``traceparent``).
            tracestate: Passed on as the ``tracestate`` header.
            fits: Checks a MODIFY's payload (e.g. against a tool's JSON schema);
                one that does not fit is a BLOCK.
        """
        request = ValidateRequest(
            action_id=str(uuid.uuid4()),
            action_type=action_type,
            source_agent_id=source_agent_id,
            thread_id=thread_id,
            trace=trace,
            payload=payload,
        )
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                answer = await self._exchange(request, tracestate)
            if answer.action_id != request.action_id:
                raise _Fault(
                    ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
                    f"reply is for action {answer.action_id!r}, not {request.action_id!r}",
                )
            if answer.decision is Decision.MODIFY and not _fits(answer.modified_payload, fits):
                raise _Fault(
                    ReasonCode.GUARDRAIL_INVALID_MODIFICATION,
                    "MODIFY without a payload that fits the action",
                )
        except TimeoutError:
            return self._fault(
                request,
                started,
                ReasonCode.GUARDRAIL_UNAVAILABLE,
                f"no answer within {self.timeout:g} s",
            )
        except _Fault as fault:
            return self._fault(request, started, fault.code, fault.message)
        except Exception as error:  # anything unforeseen blocks too: never fail open by accident
            return self._fault(
                request,
                started,
                ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
                f"{type(error).__name__}: {error}",
            )
        return Verdict(
            action_id=request.action_id,
            action_type=action_type,
            decision=answer.decision,
            reason_code=answer.reason_code,
            reason_message=answer.reason_message,
            payload=payload,
            modified_payload=answer.modified_payload
            if answer.decision is Decision.MODIFY
            else None,
            latency_ms=1000 * (time.perf_counter() - started),
            trace=trace,
        )

    async def _exchange(self, request: ValidateRequest, tracestate: str | None) -> ValidateResponse:
        headers = {"traceparent": traceparent(request.trace), "content-type": "application/json"}
        if tracestate:
            headers["tracestate"] = tracestate
        try:
            async with self._http.stream(
                "POST",
                f"{self.base_url}/v1/validate",
                content=request.model_dump_json().encode(),
                headers=headers,
            ) as response:
                status = response.status_code
                if status == 429 or status >= 500:
                    raise _Fault(ReasonCode.GUARDRAIL_UNAVAILABLE, f"HTTP {status}")
                if status != 200:
                    raise _Fault(ReasonCode.GUARDRAIL_PROTOCOL_ERROR, f"HTTP {status}")
                content_type = response.headers.get("content-type", "")
                if content_type.split(";")[0].strip().lower() != "application/json":
                    raise _Fault(
                        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
                        f"content type {content_type!r}, not application/json",
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > self.max_body_bytes:
                        raise _Fault(
                            ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
                            f"reply larger than {self.max_body_bytes} bytes",
                        )
        except httpx.HTTPError as error:
            raise _Fault(
                ReasonCode.GUARDRAIL_UNAVAILABLE, f"{type(error).__name__}: {error}"
            ) from None
        try:
            return ValidateResponse.model_validate_json(bytes(body))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise _Fault(
                ReasonCode.GUARDRAIL_PROTOCOL_ERROR, f"malformed reply at {where}: {first['msg']}"
            ) from None

    def _fault(
        self, request: ValidateRequest, started: float, code: ReasonCode, message: str
    ) -> Verdict:
        decision = Decision.BLOCK
        if self.fail_open:
            logger.warning(
                "guardrail fault (%s: %s) for %s %s: FAILING OPEN as configured",
                code,
                message,
                request.action_type,
                request.action_id,
            )
            decision, code = Decision.ALLOW, ReasonCode.GUARDRAIL_FAILED_OPEN
        return Verdict(
            action_id=request.action_id,
            action_type=request.action_type,
            decision=decision,
            reason_code=code.value,
            reason_message=message,
            payload=request.payload,
            modified_payload=None,
            latency_ms=1000 * (time.perf_counter() - started),
            trace=request.trace,
            fault=True,
        )
