"""Brokered HTTP end to end: a worker asks, the supervisor checks its grants and fetches."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]
GET = '<context app_id="app_0" view_id="view_0">execute get --url "{}"</context>'


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from loopback"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_granted_host_is_fetched_by_the_supervisor(start_desktop: Start, server: int) -> None:
    desktop = start_desktop(["fetcher"], allow_private_http=True)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    result = client.execute(GET.format(f"http://localhost:{server}/"))
    assert result["results"] == [{"status": 200, "body": "hello from loopback"}]


def test_ungranted_host_is_e_permission_and_logged(start_desktop: Start, server: int) -> None:
    desktop = start_desktop(["fetcher"], allow_private_http=True)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    with pytest.raises(AotuiError) as refused:
        client.execute(GET.format(f"http://127.0.0.1:{server}/"))
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert "127.0.0.1" in refused.value.message
    assert "Fetcher: HTTP request refused" in client.snapshot()


def test_private_addresses_need_the_config(start_desktop: Start, server: int) -> None:
    desktop = start_desktop(["fetcher"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    with pytest.raises(AotuiError) as refused:
        client.execute(GET.format(f"http://localhost:{server}/"))
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert "may not be reached" in refused.value.message  # the port, then the address class
