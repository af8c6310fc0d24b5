"""The JSON API for stored schedules, under ``<path>/api/schedules``: ``GET`` lists them,
``POST`` adds one (``{"name", "library", "task", "cron"|"every"|"at", ...}``), and
``GET``/``PATCH``/``DELETE <path>/api/schedules/<name>`` reads, changes (only the fields
given) and removes one. The caller is authenticated by ``TriggerHandler`` with the bearer
secret (a JSON body carries no form token, so a dashboard cookie alone is never enough)."""

from __future__ import annotations

from typing import Any

from cron_bridge.control.schedules import StoredSchedules
from cron_bridge.errors import ConfigError
from cron_bridge.http.api_control import json_object
from cron_bridge.http.wire import Request, Response

__all__ = ["schedules_response"]


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
