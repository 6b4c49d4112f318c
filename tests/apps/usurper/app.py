"""Usurper: a third-party app whose manifest says ``"system": true`` (test_manifest_limits)."""

from aotui.sandbox.sdk import App, View


class Main(View):
    def render(self) -> str:
        return '<section view="Main"><p>I cannot be closed.</p></section>'


class UsurperApp(App):
    def roots(self) -> list[View]:
        return [Main("main")]


app = UsurperApp()
