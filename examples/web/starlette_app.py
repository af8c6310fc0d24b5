"""Starlette: the panel as a Mount route."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from cron_bridge.http import asgi_app
from examples.web.jobs import PATH, SECRET, panel


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("shop")


app = Starlette(
    routes=[
        Route("/", home),
        Mount(PATH, app=asgi_app(panel(), secret=SECRET, path=PATH)),
    ]
)
