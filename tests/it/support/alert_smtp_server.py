"""A real SMTP server for the email tests, built on aiosmtpd.

Binds 127.0.0.1 on a free port (or the port given after OUTDIR) and prints the port on the first line of stdout. Every message
it accepts is parsed with Python's email package and written to OUTDIR as msgN.json (envelope,
headers, the multipart containers' types in order, and each part's type, Content-ID, disposition
and text, or for binary parts its size and base64). With SMTP_TEST_USER/SMTP_TEST_PASSWORD set, it
requires AUTH (over plain TCP, as a local relay would).
"""

import asyncio
import base64
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
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0
USER = os.environ.get("SMTP_TEST_USER")
PASSWORD = os.environ.get("SMTP_TEST_PASSWORD")


class Handler:
    def __init__(self):
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        parts = []
        multiparts = []
        for part in msg.walk():
            if part.is_multipart():
                multiparts.append(part.get_content_type())
                continue
            record = {
                "content_type": part.get_content_type(),
                "content_id": part["Content-ID"] and str(part["Content-ID"]),
                "disposition": part.get_content_disposition(),
            }
            content = part.get_content()
            if isinstance(content, bytes):
                record["size"] = len(content)
                record["base64"] = base64.b64encode(content).decode()
            else:
                record["text"] = content
            parts.append(record)
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "auth_login": session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
            "subject": str(msg["Subject"]),
            "from": str(msg["From"]),
            "to": str(msg["To"]),
            "message_id": str(msg["Message-ID"]),
            "content_type": msg.get_content_type(),
            "multiparts": multiparts,
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
    sock.bind(("127.0.0.1", PORT))
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
