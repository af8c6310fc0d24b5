"""The JSON API for stored schedules, under ``<path>/api/schedules``: ``GET`` lists them,
``POST`` adds one (``{"name", "library", "task", "cron"|"every"|"at", ...}``), and
``GET``/``PATCH``/``DELETE <path>/api/schedules/<name>`` reads, changes (only the fields
given) and removes one. ``POST <path>/api/schedules:add-many``, ``:update-many`` and
``:remove-many`` take many at once as JSON lines (``application/x-ndjson``), the lines
``cron-bridge schedule add-many|update-many|remove-many`` read, in bodies of up to
``BULK_BODY``. The caller is authenticated by ``TriggerHandler`` with the bearer secret (a
JSON body carries no form token, so a dashboard cookie alone is never enough)."""

from __future__ import annotations

import io
from typing import Any

from cron_bridge.control.bulk import json_lines, line_of
from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.http.api_control import json_object
from cron_bridge.http.wire import Request, Response

__all__ = ["BULK_ACTIONS", "bulk_response", "schedules_response"]

BULK_ACTIONS = ("add-many", "update-many", "remove-many")  # <path>/api/schedules:<action>
JSON_LINES = "application/x-ndjson"


def schedules_response(schedules: StoredSchedules, request: Request, name: str | None) -> Response:
    """Answer one request for the collection (``name`` None) or one schedule."""
    who = f"http:{request.client}"
    method = request.method
    try:
        if name is None:
            if method == "GET":
                found = schedules.list()
                return Response(200, {"schedules": [found[n].to_json() for n in sorted(found)]})
            if method == "POST":
                body = _object(request)
                for required in ("name", "library", "task"):
                    if not isinstance(body.get(required), str):
                        raise ConfigError(
                            "expected text", option=required, value=str(body.get(required))[:80]
                        )
                spec = schedules.add(body.pop("name"), by=who, **body)
                return Response(201, {"schedule": spec.to_json()})
            return Response(405, {"error": "use GET or POST"}, (("Allow", "GET, POST"),))
        if method == "GET":
            found_one = schedules.get(name)
            if found_one is None:
                return Response(404, {"error": f"no stored schedule called {name!r}"})
            return Response(200, {"schedule": found_one.to_json()})
        if method in ("PATCH", "POST"):
            if schedules.get(name) is None:
                return Response(404, {"error": f"no stored schedule called {name!r}"})
            spec = schedules.update(name, by=who, **_object(request))
            return Response(200, {"schedule": spec.to_json()})
        if method == "DELETE":
            gone = schedules.remove(name, by=who)
            return Response(200, {"name": name, "removed": gone.to_json() if gone else None})
        return Response(
            405, {"error": "use GET, PATCH or DELETE"}, (("Allow", "GET, PATCH, DELETE"),)
        )
    except ConfigError as exc:
        return Response(400, {"error": str(exc)})
    except TypeError as exc:  # an option the API does not take
        return Response(400, {"error": f"unknown field ({exc})"})


def _object(request: Request) -> dict[str, Any]:
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise ConfigError(
            "expected a JSON body (Content-Type: application/json)", option="body", value=""
        )
    return json_object(request)


def bulk_response(schedules: StoredSchedules, request: Request, action: str) -> Response:
    """Do ``action`` (one of ``BULK_ACTIONS``) with the JSON lines of the body: one object
    per line, as the command line's files hold them (``remove-many``: the ``name`` of each).
    ``200`` with the counts, as the command line prints them; ``400`` for a bad line or a
    refused entry, naming the entry, its line, its name and the option (nothing written; but
    an added name found stored stops at its batch, and the error says how many were)."""
    if request.method != "POST":
        return Response(405, {"error": "use POST"}, (("Allow", "POST"),))
    if not request.headers.get("content-type", "").startswith(JSON_LINES):
        return Response(400, {"error": f"expected JSON lines (Content-Type: {JSON_LINES})"})
    who = f"http:{request.client}"
    numbers: list[int] = []
    try:
        lines = json_lines(io.BytesIO(request.body).readline)
        numbers = [number for number, _ in lines]
        entries = [entry for _, entry in lines]
        if action == "add-many":
            return Response(200, {"added": len(schedules.add_many(entries, by=who))})
        if action == "update-many":
            return Response(200, {"updated": len(schedules.update_many(entries, by=who))})
        names: list[Any] = [entry.get("name") for entry in entries]  # checked by remove_many
        gone = schedules.remove_many(names, by=who)
    except ConfigError as exc:
        refusal: dict[str, Any] = {"error": str(exc), "option": exc.option}
        line = line_of(exc, numbers)
        if line is not None and exc.entry is not None:
            refusal.update(entry=exc.entry, line=line)
            if exc.job != f"entry {exc.entry + 1}":  # one without a name is said by number
                refusal["name"] = exc.job
        return Response(400, refusal)
    missing = [name for name, spec in gone.items() if spec is None]
    return Response(200, {"removed": len(gone) - len(missing), "missing": missing})
