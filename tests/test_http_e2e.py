"""Brokered HTTP end to end: a worker asks, the supervisor checks its grants and fetches."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.workers.http_calls import MAX_HTTP_IN_FLIGHT
from tests.conftest import TEST_APPS, RunningDesktop

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


def test_requests_refused_by_the_hundred_evict_only_the_app_s_own_lines(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["echo", "forger"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.execute("<context>open --application app_1</context>")
    before = client.snapshot()
    assert "Desktop initialized." in before
    assert "Installed Forger" in before
    result = client.execute(
        '<context app_id="app_1" view_id="view_0">execute forge --what http-refused '
        "--arg 200</context>"
    )
    assert result["results"] == ["200 requests refused"]
    logs = client.snapshot()
    assert "Forger: HTTP request refused" in logs
    # The desktop's own lines are still there (before, each refusal was a desktop line: 200 of
    # them pushed every other desktop line out of the 50 System Logs keep).
    assert "Desktop initialized." in logs
    assert "Installed Forger" in logs


def test_private_addresses_need_the_config(start_desktop: Start, server: int) -> None:
    desktop = start_desktop(["fetcher"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    with pytest.raises(AotuiError) as refused:
        client.execute(GET.format(f"http://localhost:{server}/"))
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert "may not be reached" in refused.value.message  # the port, then the address class


class Counted(http.server.BaseHTTPRequestHandler):
    """Counts the requests that reached it and answers 200 once :attr:`release` is set."""

    served = 0
    #: Set to let the requests held so far be answered (each waits at most 10 s).
    release = threading.Event()

    def do_GET(self) -> None:
        type(self).served += 1
        type(self).release.wait(10)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(60)
def test_a_killed_flooders_queued_requests_are_not_performed(
    start_desktop: Start, tmp_path: Path
) -> None:
    # 64 calls at once: the 9th in flight kills the worker. The app's share of the broker (4
    # threads) may be fetching already; the calls queued behind them are not performed for a
    # worker that is gone. The server holds every request until the end, so no call leaves its
    # place in flight before the 9th arrives, however slowly the worker sends them.
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counted)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        forger = Path(shutil.copytree(TEST_APPS / "forger", tmp_path / "forger"))
        manifest = json.loads((forger / "aoapp.json").read_text())
        manifest["permissions"] = ["net:http:localhost"]
        (forger / "aoapp.json").write_text(json.dumps(manifest))
        desktop = start_desktop([str(forger)], allow_private_http=True)
        client = desktop.client
        client.execute("<context>open --application app_0</context>")
        url = f"http://localhost:{httpd.server_address[1]}/"
        with pytest.raises(AotuiError) as killed:
            client.execute(
                f'<context app_id="app_0" view_id="view_0">execute forge --what http-flood '
                f'--arg "{url}"</context>'
            )
        assert "protocol violation" in killed.value.message
        Counted.release.set()  # the 4 threads free: what was queued would go next
        time.sleep(1.0)  # and would have been fetched by now
        logs = client.snapshot()
        assert "flooded the HTTP broker" in logs
        # At most the calls admitted before the flood was seen (MAX_HTTP_IN_FLIGHT; the server
        # holding them, only the 4 threads' first ones); never one of the 56 queued behind them
        # (8-12 reached it before the fix).
        assert Counted.served <= MAX_HTTP_IN_FLIGHT
    finally:
        Counted.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
