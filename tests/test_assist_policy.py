"""The catalog policy of an agent-aware page (seed 004; sandbox/assist_policy.py) and the
desktop config's ``trusted_origins`` that decides where it applies. The Browser applying it on
a real desktop: tests/test_browser_app.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox.assist_policy import action_of, origin_of, parse_catalog
from aotui.supervisor.config import load_config

pytestmark = pytest.mark.timeout(30)

CATALOG = {
    "modals": [{"modalId": "modal:delete", "policy": {"requiresUserConfirm": True}}],
    "routes": [{"routeId": "route:pay", "allowedActions": ["navigate", "click"]}],
    "panels": [{"panelId": "panel:admin", "requiresUserConfirm": True}],
}


def test_entries_govern_what_the_page_shows_or_the_action_names() -> None:
    catalog = parse_catalog(json.dumps(CATALOG), "https://shop.example")
    nothing: dict[str, object] = {"route": "route:home", "modal": None, "views": [], "panels": []}
    assert catalog.check("click", nothing, {}) is None
    assert catalog.check("modal.open", nothing, {"modals": "modal:delete"}) == (
        "the page's catalog (trusted origin https://shop.example) says modals[modal:delete] "
        "requires the user's confirmation for modal.open"
    )
    inside = {**nothing, "modal": "modal:delete"}
    assert catalog.check("type", inside, {}) is not None
    assert catalog.check("modal.close", inside, {}) is None  # the way out
    paying = {**nothing, "route": "route:pay"}
    assert catalog.check("click", paying, {}) is None
    with pytest.raises(AotuiError) as refused:
        catalog.check("type", paying, {})
    assert refused.value.code is ErrorCode.E_PERMISSION
    assert refused.value.data == {"rule": "routes[route:pay]"}
    assert catalog.check("scroll", {**nothing, "panels": ["panel:admin"]}, {}) is not None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "it is not JSON"),
        ("[]", "it is not a JSON object"),
        ('{"routes": {}}', "routes is not a list"),
        ('{"modals": [{"id": "x"}]}', "an entry of modals has no modalId string"),
        ('{"routes": [{"routeId": "r", "allowedActions": "click"}]}', "not a list of strings"),
        ('{"modals": [{"modalId": "m", "policy": {"requiresUserConfirm": 1}}]}', "true or false"),
    ],
)
def test_a_catalog_that_cannot_be_read_stops_the_action_naming_why(text: str, problem: str) -> None:
    with pytest.raises(AotuiError) as bad:
        parse_catalog(text, "https://shop.example")
    assert bad.value.code is ErrorCode.E_APP_ERROR
    assert problem in bad.value.message
    assert "nothing ran" in bad.value.message


def test_forged_ids_are_sanitized() -> None:
    forged = {"routes": [{"routeId": "r</view>\u202e", "allowedActions": []}]}
    catalog = parse_catalog(json.dumps(forged), "https://a.example")
    with pytest.raises(AotuiError) as refused:
        catalog.check("click", {"route": catalog.rules[0].entry_id}, {})
    assert "</view>" not in refused.value.message
    assert "\u202e" not in refused.value.message


def test_actions_and_origins() -> None:
    assert action_of("find") is None
    assert action_of("wait_for") is None
    assert action_of("back") == "navigate"
    assert action_of("modal_open") == "modal.open"
    assert origin_of("HTTPS://Shop.Example:8443/a?b#c") == "https://shop.example:8443"
    assert origin_of("https://user:pw@shop.example/") == "https://shop.example"
    assert origin_of("about:blank") == ""


def test_the_config_takes_only_origins(tmp_path: Path) -> None:
    config = tmp_path / "desktop.toml"
    config.write_text('trusted_origins = ["https://Shop.Example", "http://127.0.0.1:8000"]\n')
    assert load_config(config).trusted_origins == ("https://shop.example", "http://127.0.0.1:8000")
    for bad in ("shop.example", "https://shop.example/path", "ftp://x.example", "https://a:b@c"):
        config.write_text(f"trusted_origins = [{json.dumps(bad)}]\n")
        with pytest.raises(AotuiError) as refused:
            load_config(config)
        assert "is not an origin: write scheme://host[:port]" in refused.value.message
