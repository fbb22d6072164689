"""Credentials out of everything we print: messages, logs, reports and reprs.

A Redis URL may carry a password (`redis://user:secret@host:6379/0`, or redis-py's
`?password=secret`). Whatever names a URL shows it through `redact`, which keeps the scheme,
user, host, port and database, so the message still says which server, and replaces each
password with `***`.
"""

from __future__ import annotations

import re

HIDDEN = "***"
# `scheme://user:password@`: the password runs to the last `@` before the host.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^\s/]*@")
# redis-py also reads credentials from the query string.
_QUERY = re.compile(r"(?P<head>[?&](?:password|pass|passwd)=)[^&\s'\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***`."""
    text = _USERINFO.sub(lambda m: f"{m.group('head')}{HIDDEN}@", text)
    return _QUERY.sub(lambda m: f"{m.group('head')}{HIDDEN}", text)
