"""An app that crashes at import: the report must keep its exception line."""

import json


def load_settings() -> dict[str, object]:
    return json.loads("{not json")  # type: ignore[no-any-return]


SETTINGS = load_settings()
