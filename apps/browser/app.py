"""Browser: the web through the desktop (``sandbox/browser_app.py`` is its runtime).

Its manifest's ``net:http`` grants are the allow-list of what its pages may reach; ``"browser":
true`` gives its worker a headless browser inside the app's sandbox.
"""

from aotui.sandbox.browser_app import BrowserApp

app = BrowserApp()
