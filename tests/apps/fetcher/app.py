"""Fetches a URL through the brokered HTTP call, and tries to reach the network directly."""

import socket

from aotui.sandbox.sdk import App, View, operation


class FetchView(View):
    def render(self) -> str:
        return """<section view="Fetcher">
<button operation="get" args='{"url": "string"}'>Get</button>
<button operation="direct" args='{"port": "integer"}'>Connect directly</button></section>"""

    @operation
    def get(self, url: str) -> object:
        reply = self.app.http("GET", str(url))  # type: ignore[union-attr]
        return {"status": reply.status, "body": reply.text()}

    @operation
    def direct(self, port: int) -> None:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=1):
            pass


class FetcherApp(App):
    def roots(self) -> list[View]:
        return [FetchView("fetch")]


app = FetcherApp()
