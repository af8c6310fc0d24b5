"""The web surface under generated input (hypothesis): request paths, query strings, bodies
and headers of every kind (arbitrary text and bytes, huge, not UTF-8, control characters, odd
methods, bad cookies and bearer tokens, forms with and without the page's token) against the
real WSGI and ASGI apps; and record text of every kind shown on the pages. Every answer is a
well-formed response with a status of the expected set, the app keeps answering, and nothing
a request or a record says reaches a page but as escaped text without control characters."""

from __future__ import annotations

import asyncio
import json
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from io import BytesIO
from typing import Any
from urllib.parse import urlencode

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cron_bridge import Beat, declare
from cron_bridge.http import asgi_app, wsgi_app
from cron_bridge.http.html import Markup
from cron_bridge.http.layout import page
from cron_bridge.http.wire import MAX_BODY
from cron_bridge.jobs import Occurrence
from cron_bridge.stores import MemoryStore, RunRecord

SECRET = "c2VjcmV0LWZvci10ZXN0cy1vbmx5LTMyYnl0ZXM"
BASE = "/_scheduler"
JOB = "fuzz.ok"
# What the surface may answer; a 500 would be an unhandled error (no job here fails).
EXPECTED = {200, 303, 400, 401, 403, 404, 405, 413, 429, 503}
# C0 but tab, newline and carriage return; DEL and C1: never in a page or a JSON answer.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The tags and attributes the dashboard writes itself: anything else came from input.
TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "script",
    "header",
    "div",
    "h1",
    "h2",
    "a",
    "span",
    "code",
    "form",
    "label",
    "select",
    "option",
    "button",
    "input",
    "nav",
    "b",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "p",
    "svg",
    "rect",
    "text",
    "line",
    "figure",
    "figcaption",
    "ol",
    "ul",
    "li",
    "details",
    "summary",
    "pre",
    "dl",
    "dt",
    "dd",
    "section",
    "time",
    "br",
}
ATTRS = {
    "lang",
    "charset",
    "name",
    "content",
    "class",
    "href",
    "method",
    "action",
    "id",
    "value",
    "selected",
    "type",
    "aria-current",
    "aria-label",
    "role",
    "placeholder",
    "maxlength",
    "title",
    "datetime",
    "colspan",
    "rel",
    "viewbox",
    "width",
    "height",
    "x",
    "y",
    "rx",
    "x1",
    "y1",
    "x2",
    "y2",
    "aria-hidden",
    "for",
    "autocomplete",
    "required",
    "autofocus",
}


_FRAME = page("", Markup(), refresh=True)
OWN_SCRIPT = _FRAME[_FRAME.index("<script>") : _FRAME.index("</script>") + len("</script>")]


class _Tags(HTMLParser):
    """The tags, attributes and text of a page, as a browser's tokenizer reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check_body(content_type: str, body: bytes) -> _Tags | None:
    """Fail unless ``body`` is what the surface writes: a page of its own tags and one
    script, or JSON; never a control character, never markup that came from input."""
    text = body.decode("utf-8")  # strict: a page is UTF-8
    assert not CONTROL.search(text), CONTROL.search(text)
    if content_type.startswith("application/json"):
        json.loads(text)
        assert "<" not in text and ">" not in text, text[:300]
        return None
    if not text:
        return None
    assert content_type.startswith("text/html"), content_type
    parsed = _Tags()
    parsed.feed(text)
    parsed.close()
    names = [tag for tag, _ in parsed.tags]
    assert set(names) <= TAGS, set(names) - TAGS
    # Every script is the page's own (its one ``<script>``, the reloading one).
    assert text.lower().count("<script") == text.count(OWN_SCRIPT) <= 1, text[:500]
    for tag, attrs in parsed.tags:
        unknown = {name for name, _ in attrs} - ATTRS
        assert not unknown, (tag, unknown)
    return parsed


class Surface:
    """One beat's apps, signed in once for a session cookie and its form token."""

    def __init__(self) -> None:
        jobs = [
            declare(JOB, every="1h", target="inline", handler=lambda ctx: None),
            # A leap-day job west of UTC, and an hourly one east of it: the zones that carry
            # a record of year 1, or of 9999-12-31, past the calendar.
            declare(
                "fuzz.other",
                cron="0 0 29 2 *",
                tz="America/New_York",
                target="inline",
                handler=lambda ctx: None,
            ),
            declare(
                "fuzz.east",
                every="1h",
                tz="Europe/Warsaw",
                target="inline",
                handler=lambda ctx: None,
            ),
        ]
        self.store = MemoryStore(allow_local_cluster=True)
        self.beat = Beat(self.store, jobs, replica_id="fuzz-1")
        self.wsgi = wsgi_app(self.beat, secret=SECRET)
        self.asgi = asgi_app(self.beat, secret=SECRET)
        status, headers, _ = self.call_wsgi(
            "POST",
            f"{BASE}/login",
            body=f"secret={SECRET}",
            content_type="application/x-www-form-urlencoded",
        )
        assert status == 303, status
        self.cookie = dict(headers)["Set-Cookie"].split(";")[0]
        _, _, page = self.call_wsgi("GET", f"{BASE}/jobs/{JOB}", cookie=self.cookie)
        found = re.search(rb'name="?csrf"? value="([0-9a-f]{64})"', page)
        assert found is not None, page[:2000]
        self.csrf = found[1].decode()

    def call_wsgi(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        body: bytes | str = b"",
        content_type: str | None = None,
        cookie: str | None = None,
        authorization: str | None = None,
        length: str | None = None,
        client: str = "10.0.0.1",
        extra: dict[str, str] | None = None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        data = body.encode() if isinstance(body, str) else body
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "wsgi.input": BytesIO(data),
            "REMOTE_ADDR": client,
            "wsgi.url_scheme": "http",
            "CONTENT_LENGTH": str(len(data)) if length is None else length,
        }
        if content_type is not None:
            environ["CONTENT_TYPE"] = content_type
        if cookie is not None:
            environ["HTTP_COOKIE"] = cookie
        if authorization is not None:
            environ["HTTP_AUTHORIZATION"] = authorization
        for name, value in (extra or {}).items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        started: list[Any] = []
        answer = b"".join(
            self.wsgi(environ, lambda status, headers: started.extend((status, headers)))
        )
        status_line, headers = started
        code, _, reason = status_line.partition(" ")
        assert code.isdigit() and reason, status_line
        for name, value in headers:
            assert isinstance(name, str) and isinstance(value, str), (name, value)
            value.encode("latin-1")  # a header is latin-1 text
            assert "\r" not in value and "\n" not in value, (name, value)
        return int(code), headers, answer

    def call_asgi(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        query: bytes,
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        sent: list[dict[str, Any]] = []
        chunks = [body[: len(body) // 2], body[len(body) // 2 :]]

        async def receive() -> dict[str, Any]:
            if not chunks:
                return {"type": "http.disconnect"}
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": headers,
            "query_string": query,
            "client": ("10.1.0.1", 5000),
            "scheme": "http",
        }
        asyncio.run(self.asgi(scope, receive, send))
        assert len(sent) == 2 and sent[0]["type"] == "http.response.start", sent
        return int(sent[0]["status"]), dict(sent[0]["headers"]), sent[1]["body"]

    def still_answers(self) -> None:
        status, _, page = self.call_wsgi(
            "GET", f"{BASE}/", cookie=self.cookie, client="10.255.255.255"
        )
        assert status == 200 and JOB.encode() in page, status
        status, _, _ = self.call_wsgi("GET", f"{BASE}/healthz", client="10.255.255.255")
        assert status == 200, status


ROUTES = [
    "",
    "/",
    "/jobs/",
    f"/jobs/{JOB}",
    "/jobs/fuzz.other",
    "/run/",
    f"/run/{JOB}",
    "/api/jobs/",
    f"/api/jobs/{JOB}",
    f"/api/jobs/{JOB}/pause",
    f"/api/jobs/{JOB}/resume",
    "/api/schedules",
    "/api/schedules/x",
    "/api/schedules:add-many",
    "/api/schedules:update-many",
    "/api/schedules:remove-many",
    "/login",
    "/logout",
    "/healthz",
]
HOSTILE = [
    "<script>alert(1)</script>",
    '"><script>x</script>',
    "'onmouseover='x",
    "&amp;",
    "\x1b]0;title\x07",
    "\x1b[2J",
    "\x00",
    "\u202e",
    "\ud800",
    "%ff%fe",
    "%00",
    "9999-12-31T23:59:59Z",
    "a." * 300 + "@",
]
texts = st.one_of(
    st.text(max_size=60),
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.characters(codec="latin-1"), max_size=60),
)
paths = st.one_of(
    st.builds(
        lambda route, tail: BASE + route + tail,
        st.sampled_from(ROUTES),
        st.one_of(st.just(""), texts),
    ),
    st.text(max_size=300),
    st.just(BASE + "/jobs/" + "x" * 5000),
)
queries = st.one_of(
    st.just(""),
    texts,
    st.dictionaries(
        st.sampled_from(["said", "seal", "q", "state", "page", "ns"]), texts, max_size=4
    ).map(lambda d: urlencode(d, errors="surrogatepass")),
    st.sampled_from(
        [
            "said=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            "q=%ff%fe",
            "page=99999999",
            "page=-1",
            "state=failing&q=%1b%5b2J",
            "ns=%00",
            "said=" + "x" * 5000,
        ]
    ),
)
methods = st.one_of(
    st.sampled_from(
        ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND", "get"]
    ),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ-", min_size=1, max_size=20),
)
CONTENT_TYPES = [
    "application/x-www-form-urlencoded",
    "application/json",
    "application/x-ndjson",
    "text/plain",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded; charset=latin-1",
]


@st.composite
def requests(draw: st.DrawFn, surface: Surface) -> dict[str, Any]:
    """One request of every part generated: who it claims to be, what it sends."""
    authorization = draw(
        st.one_of(
            st.none(),
            st.just(f"Bearer {SECRET}"),
            texts.map(lambda t: f"Bearer {t}"),
            texts,
            st.just("Bearer " + "x" * 20_000),
            st.just(f"bearer  {SECRET} "),
        )
    )
    cookie = draw(
        st.one_of(
            st.none(),
            st.just(surface.cookie),
            texts,
            texts.map(lambda t: f"cron_bridge_session={t}"),
            st.just(surface.cookie[:-3] + "000"),
            st.just('cron_bridge_session="\\' + "\\" * 500),
        )
    )
    form = st.dictionaries(
        st.sampled_from(["csrf", "secret", "force", "reason", "catch_up", "x"]),
        st.one_of(texts, st.just(surface.csrf), st.just(SECRET), st.just("1")),
        max_size=4,
    ).map(lambda fields: urlencode(fields, errors="surrogatepass").encode())
    body = draw(
        st.one_of(
            st.just(b""),
            st.binary(max_size=300),
            form,
            st.dictionaries(
                st.sampled_from(["reason", "catch_up", "name", "cron"]),
                st.one_of(texts, st.integers(), st.booleans(), st.none()),
            ).map(lambda d: json.dumps(d).encode()),
            st.lists(  # JSON lines, as the bulk routes take them
                st.one_of(
                    st.dictionaries(
                        st.sampled_from(["name", "library", "task", "every", "queue"]),
                        st.one_of(texts, st.integers(), st.none()),
                    ).map(json.dumps),
                    texts,
                ),
                max_size=5,
            ).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
            st.just(b"x" * (MAX_BODY + 1)),
            st.just(b"\xff\xfe" * 100),
        )
    )
    length = draw(
        st.one_of(
            st.none(), st.sampled_from(["abc", "-1", "1" * 30, " 5 ", str(MAX_BODY + 1), "0"])
        )
    )
    return {
        "method": draw(methods),
        "path": draw(paths),
        "query": draw(queries),
        "body": body,
        "content_type": draw(st.one_of(st.none(), st.sampled_from(CONTENT_TYPES), texts)),
        "cookie": cookie,
        "authorization": authorization,
        "length": length,
        "client": f"10.{draw(st.integers(0, 255))}.{draw(st.integers(0, 255))}.1",
        "extra": draw(
            st.dictionaries(
                st.sampled_from(["x-forwarded-for", "referer", "host", "x-forwarded-proto"]),
                texts,
                max_size=2,
            )
        ),
    }


def _as_wsgi_text(value: str) -> str:
    """Text as a WSGI server hands it over: latin-1 characters only (PEP 3333)."""
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


def _wsgi_request(surface: Surface, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    fields = {
        k: (_as_wsgi_text(v) if isinstance(v, str) and k != "path" else v)
        for k, v in request.items()
        if k != "extra"
    }
    fields["extra"] = {k: _as_wsgi_text(v) for k, v in request["extra"].items()}
    fields["path"] = request["path"].encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    status, headers, body = surface.call_wsgi(**fields)
    return status, dict(headers), body


def test_every_generated_request_gets_a_well_formed_answer_from_the_wsgi_app() -> None:
    """Arbitrary requests, signed in or not, through the WSGI app: each answer has an
    expected status, well-formed headers, a UTF-8 page of the dashboard's own tags (or
    JSON) without control characters; the app still answers afterwards."""
    surface = Surface()

    @settings(
        max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(requests(surface))
    def one(request: dict[str, Any]) -> None:
        status, headers, body = _wsgi_request(surface, request)
        assert status in EXPECTED, (status, body[:500])
        check_body(headers.get("Content-Type", ""), body)

    one()
    surface.still_answers()


def test_every_generated_request_gets_a_well_formed_answer_from_the_asgi_app() -> None:
    """The same through the ASGI app, headers as arbitrary bytes and the body in two
    chunks."""
    surface = Surface()
    header_names = st.sampled_from(
        [
            b"authorization",
            b"cookie",
            b"content-type",
            b"content-length",
            b"x-forwarded-for",
            b"host",
        ]
    )

    @settings(
        max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(requests(surface), st.lists(st.tuples(header_names, st.binary(max_size=80)), max_size=3))
    def one(request: dict[str, Any], raw: list[tuple[bytes, bytes]]) -> None:
        headers = (
            [(b"authorization", request["authorization"].encode("utf-8", "surrogatepass"))]
            if request["authorization"] is not None
            else []
        )
        if request["cookie"] is not None:
            headers.append((b"cookie", request["cookie"].encode("utf-8", "surrogatepass")))
        if request["content_type"] is not None:
            headers.append(
                (b"content-type", request["content_type"].encode("utf-8", "surrogatepass"))
            )
        status, answered, body = surface.call_asgi(
            request["method"],
            request["path"].encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
            headers + raw,
            request["body"],
            request["query"].encode("utf-8", "surrogatepass"),
        )
        assert status in EXPECTED, (status, body[:500])
        check_body(answered.get(b"content-type", b"").decode("latin-1"), body)

    one()
    surface.still_answers()


def test_any_record_text_is_shown_only_as_escaped_text() -> None:
    """Record text of any kind (markup, quotes, ampersands, control characters, lone
    surrogates, bidi overrides) written as a run's error, reason and traceback, and the
    status line's ``said``: the job page answers 200 with only the dashboard's own tags, no
    control character, and the text shown as text."""
    surface = Surface()
    now = datetime.now(UTC).replace(microsecond=0)

    @settings(
        max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(
        st.one_of(
            st.text(min_size=1, max_size=200),
            st.sampled_from(HOSTILE),
            st.text(
                alphabet=st.characters(categories=["Cc", "Cf", "Cs", "Po", "Sm"]),
                min_size=1,
                max_size=80,
            ),
        )
    )
    def one(text: str) -> None:
        surface.store._runs.clear()
        at = now - timedelta(hours=1)
        surface.store.record(
            RunRecord(
                job=JOB,
                occurrence_id=Occurrence(job=JOB, scheduled_at=at).id,
                outcome="failed",
                trigger="schedule",
                replica="fuzz-1",
                started_at=at,
                error=text,
                reason=text,
                traceback=text,
            )
        )
        for path in (f"{BASE}/jobs/{JOB}", f"{BASE}/"):
            status, headers, body = surface.call_wsgi(
                "GET",
                path,
                cookie=surface.cookie,
                query=urlencode({"said": text}, errors="surrogatepass"),
            )
            assert status == 200, (status, body[:500])
            parsed = check_body(dict(headers)["Content-Type"], body)
            assert parsed is not None
            shown = "".join(parsed.text)
            visible = _visible(text)
            if path.endswith(JOB) and visible and not set(visible) & set("=:@"):
                # Shown as text (redaction may mask a ``name=value`` or a URL's password).
                assert visible[:50] in shown, (visible, shown[-3000:])

    one()
    surface.still_answers()


# Shown as escapes, as the logs and the CLI write them: bidirectional marks and overrides,
# the Unicode line separators, lone surrogates.
_ESCAPED_AS_U = {
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
}


def _visible(text: str) -> str:
    """What of ``text`` a page shows: newlines as they are, every other control character as
    its escape (``\\x1b``, ``\\t``), bidirectional marks and overrides, line separators and lone
    surrogates as ``\\uXXXX``; from its first to its last character that is not a space."""
    shown = []
    for ch in text:
        if ch == "\n":
            shown.append(ch)
        elif ch in "\t\r":
            shown.append({"\t": "\\t", "\r": "\\r"}[ch])
        elif unicodedata.category(ch) == "Cc":
            shown.append(f"\\x{ord(ch):02x}")
        elif unicodedata.category(ch) == "Cs" or ord(ch) in _ESCAPED_AS_U:
            shown.append(f"\\u{ord(ch):04x}")
        else:
            shown.append(ch)
    return "".join(shown).strip()


def test_records_dated_at_the_edges_of_time_answer_200() -> None:
    """A run record dated 9999-12-31T23:59:59Z, one dated year 1, and a change-log entry whose
    ``at`` has no zone: the overview and the job pages answer 200 and show them."""
    surface = Surface()
    for job, at in (
        (JOB, datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("fuzz.east", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("fuzz.other", datetime(1, 1, 1, tzinfo=UTC)),
    ):
        record = RunRecord(
            job=job,
            occurrence_id=Occurrence(job=job, scheduled_at=at).id,
            outcome="completed",
            trigger="schedule",
            replica="fuzz-1",
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        # The shared stores skip such a record where they read it (tests/stores/
        # test_hostile_bytes.py); the memory store hands its records over as they are, so
        # the pages must show one whatever a reader below them lets through.
        object.__setattr__(record, "started_at", at)
        surface.store.record(record)
    surface.store.put_control(
        f"change:{JOB}",
        "1:naive",
        json.dumps(
            {"action": "paused", "by": "ops", "at": "2026-12-01T10:00:00", "reason": "no zone"}
        ),
    )
    pages: dict[str, bytes] = {}
    jobs = (JOB, "fuzz.east", "fuzz.other")
    for path in (f"{BASE}/", *(f"{BASE}/jobs/{job}" for job in jobs)):
        status, headers, body = surface.call_wsgi("GET", path, cookie=surface.cookie)
        assert status == 200, (path, status, body[:300])
        check_body(dict(headers)["Content-Type"], body)
        pages[path] = body
    assert b"9999-12-31 23:59:59" in pages[f"{BASE}/jobs/{JOB}"]
    assert b"9999-12-31 23:59:59 UTC" in pages[f"{BASE}/jobs/fuzz.east"]  # not in Warsaw
    assert b"0001-01-01 00:00:00 UTC" in pages[f"{BASE}/jobs/fuzz.other"]  # nor in New York
    # A change whose time has no zone is skipped where the change log is read (warned once).
    assert b"2026-12-01T10:00:00" not in pages[f"{BASE}/jobs/{JOB}"]
    surface.still_answers()
