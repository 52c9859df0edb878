"""Keep secrets out of everything a run writes: records, tracebacks, Hydra's files, W&B, the console.

Two nets, because a secret can arrive two ways:
- by name: a config key or command-line override that looks like a credential (`api_key`,
  `db_password`, `hf_token`) keeps its key but its value becomes `<redacted>`;
- by value: the values of environment variables whose names contain KEY, TOKEN, SECRET, PASSWORD
  (e.g. a config that interpolates `${oc.env:HF_TOKEN}` under an innocent key) are replaced wherever
  they appear in text. Values shorter than `MIN_SECRET_LEN` are left alone (`TOKENIZERS_PARALLELISM=false`
  is not a secret, and replacing "false" everywhere would corrupt records).
No torch import: reports and the store use this too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MIN_SECRET_LEN = 8


def is_secret_name(name: str) -> bool:
    """An environment variable whose name contains a secret word (KEY, TOKEN, ...), case-insensitive."""
    up = name.upper()
    return any(w in up for w in SECRET_WORDS)


def is_secret_key(key: str) -> bool:
    """A config key or override path that names a credential: a part of it (split on `._-+/`) is a
    secret word or ends with one (`api_key`, `apikey`, `hf_token`, `db_password`), so that
    `max_tokens` or `exclude_keys` stay readable."""
    parts = [p for p in re.split(r"[._\-+/~\s]+", key.upper()) if p]
    return any(p.endswith(w) or p.startswith("PASSW") for p in parts for w in SECRET_WORDS)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if is_secret_name(k) and v and len(v) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)  # longest first: a value inside another is still caught


def redact_text(text: str, values: Iterable[str] | None = None) -> str:
    for v in secret_values() if values is None else values:
        if v in text:
            text = text.replace(v, REDACTED)
    return text


def redact(obj, values: Iterable[str] | None = None, by_name: bool = True):
    """A copy of a JSON-like tree with secret values redacted, and (by_name) the values of
    secret-named keys too. Keys themselves are kept: the record shows that something was there."""
    values = secret_values() if values is None else list(values)
    if isinstance(obj, Mapping):
        return {k: (REDACTED if by_name and is_secret_key(str(k)) and v not in (None, "", [], {})
                    else redact(v, values, by_name)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v, values, by_name) for v in obj]
    if isinstance(obj, str):
        return redact_text(_OVERRIDE.sub(_redact_override, obj) if by_name and "=" in obj else obj, values)
    return obj


# key=value pairs inside a string (an override, or Hydra's comma-joined override_dirname)
_OVERRIDE = re.compile(r"(?P<key>[+~]*[A-Za-z_][\w.\-/]*)=(?P<val>[^,\s]*)")


def _redact_override(m: re.Match) -> str:
    return f"{m['key']}={REDACTED}" if is_secret_key(m["key"]) and m["val"] else m[0]


def redact_arg(arg: str, values: Iterable[str] | None = None) -> str:
    """One command-line argument: `+db_password=x` -> `+db_password=<redacted>`; values by value."""
    return redact_text(_OVERRIDE.sub(_redact_override, arg), values)


def redact_argv(argv: Iterable[str]) -> list[str]:
    values = secret_values()
    return [redact_arg(a, values) for a in argv]


def argv_secret_values(argv: Iterable[str]) -> list[str]:
    """Secret values given on the command line (`+db_password=x` -> x) plus the environment's."""
    vals = {a.partition("=")[2] for a in argv if "=" in a and is_secret_key(a.partition("=")[0])}
    vals = {v for v in vals if len(v) >= 3}
    return sorted(vals | set(secret_values()), key=len, reverse=True)


class RedactingStream:
    """A text stream that redacts given values in everything written through it (stdout/stderr of the
    CLI). Everything else is delegated, so tqdm, logging and isatty checks behave as before."""

    def __init__(self, stream, values: Iterable[str]):
        self._stream = stream
        self._values = list(values)

    def write(self, text):
        if self._values and isinstance(text, str):
            text = redact_text(text, self._values)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)
