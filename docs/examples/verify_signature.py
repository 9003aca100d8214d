"""Check that a thresholds document came from your vigil, unaltered (needs the `cryptography` package)."""

import base64

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def verify(body: bytes, signature_b64: str, public_key_b64: str) -> bool:
    """True when `signature_b64` (header X-Vigil-Signature) signs exactly `body` with the pinned key."""
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key_b64))
    try:
        key.verify(base64.b64decode(signature_b64), body)
        return True
    except InvalidSignature:
        return False
