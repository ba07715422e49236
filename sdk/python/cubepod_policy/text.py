"""Strings quoted as the Rust SDK quotes them (`{value:?}`): the default policy's messages and
the `SpecApplied` record hold such quoted values, and a Python policy must write the same text
as the Rust one for the same input."""

from __future__ import annotations

import unicodedata

# Rust's `char::is_printable` is false for these general categories (but for the space).
_UNPRINTABLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"}
_ESCAPES = {"\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"', "\0": "\\0"}


def quoted(text: str) -> str:
    """`text` in double quotes, escaped as Rust's `Debug` for `str` escapes it."""
    out = ['"']
    for i, c in enumerate(text):
        escape = _ESCAPES.get(c)
        if escape is not None:
            out.append(escape)
        elif (c != " " and unicodedata.category(c) in _UNPRINTABLE) or (
            i == 0 and unicodedata.category(c) in ("Mn", "Me")
        ):
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)
