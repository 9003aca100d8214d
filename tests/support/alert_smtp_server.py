"""A real SMTP server for the email tests, built on aiosmtpd.

Binds 127.0.0.1 on a free port and prints the port on the first line of stdout. Every message
it accepts is parsed with Python's email package and written to OUTDIR as msgN.json (envelope,
headers, and each MIME part's type and text). With SMTP_TEST_USER/SMTP_TEST_PASSWORD set, it
requires AUTH (over plain TCP, as a local relay would).
"""

import asyncio
import email
import email.policy
import json
import os
import socket
import sys

try:
    from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword
except ImportError:
    print("NO_AIOSMTPD", flush=True)
    sys.exit(3)

OUTDIR = sys.argv[1]
USER = os.environ.get("SMTP_TEST_USER")
PASSWORD = os.environ.get("SMTP_TEST_PASSWORD")


class Handler:
    def __init__(self):
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        parts = []
        for part in msg.walk():
            if part.is_multipart():
                continue
            parts.append({"content_type": part.get_content_type(), "text": part.get_content()})
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "auth_login": session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
            "subject": str(msg["Subject"]),
            "from": str(msg["From"]),
            "to": str(msg["To"]),
            "message_id": str(msg["Message-ID"]),
            "content_type": msg.get_content_type(),
            "parts": parts,
        }
        path = os.path.join(OUTDIR, "msg%d.json" % self.count)
        self.count += 1
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.rename(path + ".tmp", path)
        return "250 Message accepted for delivery"


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login.decode() == USER
        and auth_data.password.decode() == PASSWORD
    )
    return AuthResult(success=ok, auth_data=auth_data if ok else None)


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    handler = Handler()
    kwargs = {}
    if USER:
        kwargs = {"authenticator": authenticator, "auth_require_tls": False, "auth_required": True}
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: SMTP(handler, hostname="localhost", **kwargs), sock=sock)
    print(sock.getsockname()[1], flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
