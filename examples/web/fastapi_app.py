"""FastAPI: the panel mounted at /_scheduler next to the app's own routes."""

from __future__ import annotations

from fastapi import FastAPI

from cron_bridge.http import asgi_app
from examples.web.jobs import PATH, SECRET, panel

app = FastAPI()


@app.get("/")
def home() -> dict[str, str]:
    return {"app": "shop"}


app.mount(PATH, asgi_app(panel(), secret=SECRET, path=PATH))
