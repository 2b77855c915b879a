"""kda_lab.measure.notify: webhook POST of a one-line JSON summary; never fails the run."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from kda_lab.measure import notify as notify_mod
from kda_lab.measure.notify import notify


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        type(self).received.append({"path": self.path, "body": body, "ctype": self.headers.get("Content-Type")})
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch) -> None:
    """urllib honours proxy variables; the local test server must be reached directly."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Handler", (_Recorder,), {"received": [], "status": 200})
    httpd = http.server.HTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/hook", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_payload_is_received_as_one_json_line(server, monkeypatch) -> None:
    url, handler = server
    monkeypatch.setenv("KDA_WEBHOOK_URL", url)
    notify("bench", {"task": "h200_x", "geomean": 1.2345678, "worst_row": "qwen_L19", "rows": 15})
    assert len(handler.received) == 1
    got = handler.received[0]
    assert got["path"] == "/hook"
    assert got["ctype"] == "application/json"
    assert b"\n" not in got["body"]
    data = json.loads(got["body"])
    assert data["event"] == "bench"
    assert data["summary"] == {"task": "h200_x", "geomean": 1.2345678, "worst_row": "qwen_L19", "rows": 15}
    assert data["text"] == "kda bench: task=h200_x geomean=1.235 worst_row=qwen_L19 rows=15"


def test_values_json_cannot_encode_are_sent_as_strings(server, monkeypatch, tmp_path) -> None:
    url, handler = server
    monkeypatch.setenv("KDA_WEBHOOK_URL", url)
    notify("export", {"path": tmp_path})
    assert json.loads(handler.received[0]["body"])["summary"]["path"] == str(tmp_path)


def test_unset_variable_sends_nothing(server, monkeypatch) -> None:
    url, handler = server
    monkeypatch.delenv("KDA_WEBHOOK_URL", raising=False)
    notify("check", {"task": "t"})
    monkeypatch.setenv("KDA_WEBHOOK_URL", "   ")
    notify("check", {"task": "t"})
    assert handler.received == []


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_url_warns_and_does_not_raise(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KDA_WEBHOOK_URL", f"http://127.0.0.1:{_closed_port()}/hook")
    t0 = time.monotonic()
    notify("bench", {"task": "t"})
    assert time.monotonic() - t0 < notify_mod.TIMEOUT_S + 2
    err = capsys.readouterr().err
    assert "webhook notification for 'bench' failed" in err


def test_http_error_status_and_bad_url_only_warn(server, monkeypatch, capsys) -> None:
    url, handler = server
    handler.status = 500
    monkeypatch.setenv("KDA_WEBHOOK_URL", url)
    notify("bench", {"task": "t"})
    assert len(handler.received) == 1
    monkeypatch.setenv("KDA_WEBHOOK_URL", "not a url")
    notify("bench", {"task": "t"})
    err = capsys.readouterr().err
    assert err.count("failed") == 2


def test_timeout_is_bounded(monkeypatch, capsys) -> None:
    """A server that accepts but never answers costs at most the timeout."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        monkeypatch.setattr(notify_mod, "TIMEOUT_S", 0.5)
        monkeypatch.setenv("KDA_WEBHOOK_URL", f"http://127.0.0.1:{s.getsockname()[1]}/")
        t0 = time.monotonic()
        notify("bench", {"task": "t"})
        assert time.monotonic() - t0 < 3
        assert "failed" in capsys.readouterr().err
    finally:
        s.close()
