"""Flask: the panel dispatched by werkzeug's DispatcherMiddleware (Flask's own WSGI toolkit)."""

from __future__ import annotations

from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from cron_bridge.http import wsgi_app
from examples.web.jobs import PATH, SECRET, panel

app = Flask(__name__)


@app.get("/")
def home() -> str:
    return "shop"


app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
    app.wsgi_app, {PATH: wsgi_app(panel(), secret=SECRET, path=PATH)}
)
