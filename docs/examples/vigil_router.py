"""Read vigil's router feed with the standard library: fetch, check, and order targets by model or chain."""

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

SCHEMA_VERSION = 2


class StaleThresholds(Exception):
    """The document cannot be trusted: keep the last good routing."""


def _checked(doc, now=None):
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise StaleThresholds(f"unknown schema_version {doc.get('schema_version')!r}")
    expires_at = datetime.fromisoformat(doc["expires_at"].replace("Z", "+00:00"))
    if (now or datetime.now(timezone.utc)) >= expires_at:
        raise StaleThresholds(f"thresholds expired at {doc['expires_at']}")
    return doc


def _url(base_url, **filters):
    query = urllib.parse.urlencode({k: v for k, v in filters.items() if v is not None})
    return f"{base_url}/v1/thresholds" + (f"?{query}" if query else "")


def fetch_thresholds(base_url, token, now=None, timeout=5.0, **filters):
    """The document (optionally narrowed by model=, provider= or chain=), refused when stale or unknown."""
    request = urllib.request.Request(_url(base_url, **filters), headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return _checked(json.load(response), now)


class Feed:
    """Polls the document with If-None-Match: a 304 keeps the copy already held."""

    def __init__(self, base_url, token, timeout=5.0, **filters):
        self.url = _url(base_url, **filters)
        self.token, self.timeout = token, timeout
        self.etag, self.doc, self.not_modified = None, None, 0

    def poll(self, now=None):
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.etag:
            headers["If-None-Match"] = self.etag
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers), timeout=self.timeout) as r:
                self.doc, self.etag = json.load(r), r.headers.get("ETag")
        except urllib.error.HTTPError as e:
            if e.code != 304 or self.doc is None:
                raise
            self.not_modified += 1
        return _checked(self.doc, now)


def fallback_order(doc, model):
    """Targets serving `model`, best first, without open breakers."""
    usable = [t for t in doc["targets"] if t["model"] == model and t["breaker"] != "open"]
    return sorted(usable, key=lambda t: t["rank"])


def chain_order(doc, chain):
    """The chain's targets in the order to try them now (open breakers are already left out)."""
    for c in doc["chains"]:
        if c["name"] == chain:
            return c["order"]
    raise KeyError(f"no chain {chain!r} in the document")


def first_token_deadline_s(target):
    """Seconds to wait for the first token before trying the next target (None: too few samples yet)."""
    limit = target.get("failover_ttft_ms")
    return None if limit is None else limit / 1000.0
