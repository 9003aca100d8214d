"""Keep a LiteLLM Router in step with vigil: rebuild it from ?format=litellm whenever the ETag changes."""

import json
import urllib.error
import urllib.request

import yaml
from litellm import Router


class VigilRouter:
    """Holds a LiteLLM Router built from vigil's generated config, rebuilt when the config changes."""

    def __init__(self, base_url, token, timeout=5.0):
        self.url = f"{base_url}/v1/thresholds?format=litellm"
        self.token, self.timeout = token, timeout
        self.etag, self.router, self.config = None, None, None

    def refresh(self):
        """Fetches the config (If-None-Match); True when the Router was rebuilt."""
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.etag:
            headers["If-None-Match"] = self.etag
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers), timeout=self.timeout) as r:
                config, etag = yaml.safe_load(r.read()), r.headers.get("ETag")
        except urllib.error.HTTPError as e:
            if e.code == 304 and self.router is not None:
                return False
            raise
        # The document as it is; a new Router per version: construction is cheap and needs no network.
        self.router = Router(model_list=config["model_list"], **config["router_settings"])
        self.config, self.etag = config, etag
        return True

    def pick(self, group):
        """The vigil target LiteLLM would call first for `group` (a chain name or a model id)."""
        deployment = self.router.get_available_deployment(model=group)
        return deployment["model_info"]["vigil_target"]


if __name__ == "__main__":
    import sys

    vr = VigilRouter(sys.argv[1], sys.argv[2])
    vr.refresh()
    print(json.dumps({"pick": vr.pick(sys.argv[3])}))
