"""The JSON API for pausing and resuming jobs: ``POST <path>/api/jobs/<job>/pause`` (with an
optional ``reason``, as JSON or a form field) and ``.../resume`` (optional ``catch_up``);
``GET <path>/api/jobs/<job>`` says whether it is paused. The caller is authenticated by
``TriggerHandler`` (the bearer secret, or a dashboard session with its form token) before
anything here runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cron_bridge.control import pause as control
from cron_bridge.errors import ConfigError
from cron_bridge.http.wire import Request, Response
from cron_bridge.plumbing import inbound

if TYPE_CHECKING:
    from cron_bridge.beat.replica import Beat

__all__ = ["ACTIONS", "control_response", "json_object"]

ACTIONS = ("pause", "resume")


def control_response(
    beat: Beat,
    request: Request,
    name: str,
    action: str | None,
    *,
    from_page: bool,
    back: Callable[[str], Response],
) -> Response:
    """Do ``action`` (None: only say the state) for job ``name``; JSON, or, when the dashboard
    asked, ``back`` (the job's page) with what was done in words."""
    if beat.job(name) is None:
        return Response(404, {"error": f"no job called {name!r}"})
    if action is None:
        if request.method != "GET":
            return Response(405, {"error": "use GET"}, (("Allow", "GET"),))
        pause = control.pause_of(beat.store, name)
        return Response(200, {"job": name, "paused": pause.to_json() if pause else None})
    if request.method != "POST":
        return Response(405, {"error": "use POST"}, (("Allow", "POST"),))
    who = f"{'dashboard' if from_page else 'http'}:{request.client}"
    try:
        if action == "pause":
            record = control.pause(beat.store, name, reason=_reason(request), by=who)
            body: dict[str, Any] = {"job": name, "paused": record.to_json()}
            said = f"paused: {name}"
        else:
            catch_up = _flag(request, "catch_up")
            ended, ran = beat.resume(name, by=who, catch_up=catch_up)
            body = {"job": name, "was_paused": ended.to_json() if ended else None}
            said = f"resumed: {name}" if ended else f"{name} was not paused"
            if catch_up:
                body["caught_up"] = ran.to_json() if ran else None
                said += f"; caught up: {ran.outcome} {ran.occurrence_id}" if ran else ""
    except ConfigError as exc:
        return Response(400, {"error": str(exc)})
    if from_page:
        return back(said)
    return Response(200, body)


JSON_DEPTH = 8  # a stored schedule's body is 3 deep; its kwargs may nest a little


def _body(request: Request) -> dict[str, Any]:
    """A JSON body's object, or the form's fields; ConfigError for anything else."""
    if not request.headers.get("content-type", "").startswith("application/json"):
        return dict(request.form())
    return json_object(request)


def json_object(request: Request) -> dict[str, Any]:
    """The JSON object of the body (empty: ``{}``); ConfigError for anything else."""
    try:
        data = inbound.loads(request.body or b"{}", max_depth=JSON_DEPTH)
    except ValueError as exc:
        raise ConfigError(f"expected a JSON object ({exc})", option="body", value="") from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object", option="body", value="")
    return data


def _flag(request: Request, name: str) -> bool:
    value = _body(request).get(name, False)
    if value not in (True, False, "1", "0", "true", "false"):
        raise ConfigError("expected true or false", option=name, value=str(value)[:80])
    return value in (True, "1", "true")


def _reason(request: Request) -> str:
    """The ``reason`` of a JSON body or a form; ConfigError for anything but text."""
    reason = _body(request).get("reason", "")
    if not isinstance(reason, str):
        raise ConfigError("expected text", option="reason", value=str(reason)[:80])
    return reason
