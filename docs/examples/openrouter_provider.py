"""Set OpenRouter's `provider.order` per request from vigil's ranking of the pinned upstream hosts."""

import json
import urllib.request


def provider_preferences(base_url, token, model, timeout=5.0):
    """The `provider` object vigil publishes for `model` (None when vigil pins no route for it)."""
    request = urllib.request.Request(
        f"{base_url}/v1/thresholds?format=openrouter", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        models = json.load(response)["models"]
    entry = models.get(model)
    return None if entry is None else entry["provider"]


def chat(openrouter_base, api_key, model, messages, provider=None, timeout=30.0):
    """One chat completion through OpenRouter with the given provider preferences."""
    body = {"model": model, "messages": messages}
    if provider is not None:
        body["provider"] = provider
    request = urllib.request.Request(
        f"{openrouter_base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)
