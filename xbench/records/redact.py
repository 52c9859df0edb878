"""Keep secrets out of everything a run writes: records, tracebacks, Hydra's files, W&B, the console.

Three nets, because a secret can arrive several ways and travel in several shapes:
- by name, in structures: a config key that looks like a credential (`api_key`, `db_password`,
  `hf_token`) keeps its key but its value becomes `<redacted>`;
- by name, in text: `key=value`, `key: value`, `'key': 'value'` with a secret key have the whole value
  redacted, whatever its shape (a sweep `a,b`, a quoted string with commas or spaces, a list `[a,b]`,
  a dict `{u:x,p:y}`); the password of a URL (`https://user:PASSWORD@host`) too;
- by value, everywhere: the values of secret-named environment variables, and the values this process
  learned from its command line and config (`remember`): every element of a sweep, list or dict given
  under a secret key, and URL passwords. Environment values shorter than `MIN_SECRET_LEN`, and given
  values shorter than `MIN_GIVEN_LEN` or that are numbers or booleans, are left to the by-name nets
  (`TOKENIZERS_PARALLELISM=false` or `key_dim=128` must not turn every "false" or "128" into `<redacted>`).
No torch import: reports and the store use this too.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"
# A name is secret when it contains one of these (environment) or a part of it ends with one (config keys).
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS",
                "AUTHORIZATION", "COOKIE")
# Short words that are secret only as a whole part of a name or its end (`db_pwd`, `basic_auth`, `oauth`,
# `jwt`, `smtp_pass`, `db_pw`), never inside a longer word (`author`, `passes`, `bypass_cache`).
# the last two: HTTP header names (x-amz-signature)
SECRET_ENDINGS = ("PWD", "AUTH", "JWT", "BEARER", "SIGNATURE")
SECRET_PARTS = ("PASS", "PW")
# Plurals: `secrets`, `passwords`, `cookies` always; `keys` and `tokens` only after a word that makes them
# credentials (`api_keys`, `access_tokens`, `apikeys`), since `max_tokens` and `exclude_keys` are not.
QUALIFIED_PLURALS = ("KEYS", "TOKENS")
CREDENTIAL_QUALIFIERS = (
    "API",
    "ACCESS",
    "AUTH",
    "OAUTH",
    "REFRESH",
    "BEARER",
    "SESSION",
    "SECRET",
    "PRIVATE",
    "SIGNING",
    "CLIENT",
    "ID",
    "APP",
    "USER",
    "SERVICE",
    "PERSONAL",
    "CSRF",
    "XSRF",
    "HF",
    "GITHUB",
    "GH",
    "WANDB",
    "AWS",
    "GCP",
    "AZURE",
    "SSH",
    "GPG",
    "ENCRYPTION",
)
_NOT_SECRET_ENV = ("PWD", "OLDPWD", "XAUTHORITY")  # the shell's working folders, X's cookie file path
MIN_SECRET_LEN = 8
MIN_GIVEN_LEN = 4
_NOT_SECRET = ("FULL_KEY",)  # OmegaConf's error messages name the offending key with it
_LEARNED: set[str] = set()  # secret values given to this process (command line, config): see remember()


def _secret_parts(parts: list[str]) -> bool:
    return any(p.endswith(w) for p in parts for w in SECRET_WORDS + SECRET_ENDINGS) \
        or any(p in SECRET_PARTS or p.startswith("PASSW") for p in parts) or _secret_plural(parts)


def _secret_plural(parts: list[str]) -> bool:
    """SECRETS, DB_PASSWORDS, COOKIES; API_KEYS, ACCESS_TOKENS, APIKEYS (see QUALIFIED_PLURALS)."""
    for i, p in enumerate(parts):
        if not p.endswith("S"):
            continue
        if p.endswith(_ALWAYS_PLURALS) or _qualified_plural(p, parts[i - 1] if i else ""):
            return True
    return False


# The plurals that are secret wherever they stand (SECRETS, PASSWORDS, COOKIES, PWDS, ...).
_ALWAYS_PLURALS = tuple(w + "S" for w in SECRET_WORDS + SECRET_ENDINGS if w + "S" not in QUALIFIED_PLURALS)


def _qualified_plural(part: str, before: str) -> bool:
    """KEYS or TOKENS after a credential word, in the same part (APIKEYS) or the one `before` (API_KEYS)."""
    return any(part.endswith(w) and (part[:-len(w)] or before).endswith(CREDENTIAL_QUALIFIERS)
               for w in QUALIFIED_PLURALS)


def is_secret_name(name: str) -> bool:
    """An environment variable whose name contains a secret word (KEY, TOKEN, ...), or one of whose
    `_`-separated parts is or ends with a short one (DB_PWD, BASIC_AUTH, SMTP_PASS), case-insensitive."""
    up = name.upper()
    if up in _NOT_SECRET_ENV:
        return False
    return any(w in up for w in SECRET_WORDS) or _secret_parts([p for p in re.split(r"[_\-.]+", up) if p])


def is_secret_key(key: str) -> bool:
    """A config key or override path that names a credential: a part of it (split on `._-+/`) is a
    secret word or ends with one (`api_key`, `apikey`, `hf_token`, `db_password`), so that
    `max_tokens` or `exclude_keys` stay readable."""
    if key.upper().lstrip("+~") in _NOT_SECRET:
        return False
    parts = [p for p in re.split(r"[._\-+/~\s]+", key.upper()) if p]
    return _secret_parts(parts)


def _hydra_escaped(v: str) -> str:
    """How Hydra writes a value back into an override string (its launch lines, multirun.yaml)."""
    return re.sub(r"([\\()\[\]{}:=,\s'\"])", r"\\\1", v)


def _worth_learning(v: str) -> bool:
    return len(v) >= MIN_GIVEN_LEN and v.lower() not in ("true", "false", "null", "none") \
        and not re.fullmatch(r"[-+]?[\d_.eE]+", v)


def remember(values: Iterable[str]) -> None:
    """Secret values found on the command line or in the config: from now on they are redacted by value
    in every output of this process (records, W&B, the console)."""
    for v in values:
        if isinstance(v, str) and _worth_learning(v):
            _LEARNED.update((v, _hydra_escaped(v)))


def forget() -> None:
    """Drop the values learned by remember() (tests)."""
    _LEARNED.clear()


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Environment secret values (and, for this process's environment, the learned ones), longest first
    so that a value inside another is still caught."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if is_secret_name(k) and v and len(v) >= MIN_SECRET_LEN}
    if environ is None:
        vals |= _LEARNED
    return sorted(vals, key=len, reverse=True)


# ---- by name, in text ------------------------------------------------------------------------------

_KEY_CHARS = r"[A-Za-z_][\w.\-/]*"
# key=value / key: value / 'key': 'value' / "key": "value" (the value starts where the match ends)
_PAIR = re.compile(rf"""(?P<q>['"])(?P<qkey>{_KEY_CHARS})(?P=q)\s*:\s*"""
                   rf"""|(?<![\w.\-/+~\\])(?P<key>[+~]*{_KEY_CHARS})(?:=|:(?!//)[ \t]*)""")
_NEXT_OVERRIDE = re.compile(rf"\s*[+~]*{_KEY_CHARS}=")  # after a comma: a new override begins
# scheme://user:PASSWORD@ (also as Hydra escapes it: https\://user\:PASSWORD@)
_URL_CREDENTIALS = re.compile(r"(?P<pre>[A-Za-z][\w+.\-]*\\?:\\?/\\?/[^\s:/@\\]*(?:\\?:))(?P<pw>[^\s/@]+)@")
# scheme://TOKEN@host: a user part alone of 8 or more characters is a token (GitHub's
# https://ghp_...@github.com); short ones (git@, ubuntu@) are user names and stay
_URL_USER_TOKEN = re.compile(r"(?P<pre>[A-Za-z][\w+.\-]*\\?:\\?/\\?/)(?P<pw>[^\s:/@\\]{8,})@")
# HTTP credentials after their scheme (`Authorization: Bearer <token>`, `Basic <base64>`), and JSON web tokens
_AUTH_SCHEME = re.compile(r"(?i)(?P<pre>\bbearer\s+|authorization\s*[:=]\s*(?:basic|digest|token)\s+)"
                          r"(?P<pw>[\w\-.~+/]{8,}=*)")
_JWT = re.compile(r"\beyJ[\w\-]{6,}\.[\w\-]{6,}\.[\w\-]*")
_CLOSE = {"[": "]", "{": "}", "(": ")"}


def _value_end(text: str, i: int, comma_ends: bool) -> int:
    """Where the value starting at text[i] ends: quotes and brackets are followed, whitespace ends it;
    a comma ends it in a mapping's repr (`comma_ends`), and in an override only when a new `key=`
    follows (Hydra's joined overrides): `a,b` is a sweep."""
    depth, quote, n = [], None, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == "\\":
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif c in _CLOSE:
            depth.append(_CLOSE[c])
        elif c in "]})":
            if not depth:
                break
            depth.pop()
        elif not depth and (c.isspace() or (c == "," and (comma_ends or _NEXT_OVERRIDE.match(text, i + 1)))):
            break
        i += 1
    return min(i, n)


def redact_pairs(text: str) -> str:
    """`+db_password=a,b`, `api_key: x`, `'hf_token': '...'` -> the key kept, the whole value redacted."""
    if "=" not in text and ":" not in text:
        return text
    out, pos = [], 0
    for m in _PAIR.finditer(text):
        if m.start() < pos:
            continue  # inside a value already redacted
        key = m["qkey"] or m["key"]
        if not is_secret_key(key):
            continue
        end = _value_end(text, m.end(), comma_ends=not text[m.start():m.end()].rstrip().endswith("="))
        if end == m.end():
            continue  # nothing given
        out += [text[pos:m.end()], REDACTED]
        pos = end
    return "".join(out) + text[pos:] if out else text


def redact_values(text: str, values: Iterable[str] | None = None) -> str:
    """The by-value net alone: every known secret value (default: the environment's and the learned ones)."""
    for v in secret_values() if values is None else values:
        if v in text:
            text = text.replace(v, REDACTED)
    return text


def redact_text(text: str, values: Iterable[str] | None = None) -> str:
    """Every net on one string: secret values, JSON web tokens, HTTP credentials (`Bearer ...`), secret
    key=value pairs, URL passwords and user-part tokens."""
    text = redact_values(text, values)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    text = _AUTH_SCHEME.sub(lambda m: m["pre"] + REDACTED, text)
    text = redact_pairs(text)
    if "@" in text:
        text = _URL_CREDENTIALS.sub(lambda m: m["pre"] + REDACTED + "@", text)
        text = _URL_USER_TOKEN.sub(lambda m: m["pre"] + REDACTED + "@", text)
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
        return redact_text(obj, values)
    return obj


def redact_arg(arg: str, values: Iterable[str] | None = None) -> str:
    """One command-line argument: `+db_password=x,y` -> `+db_password=<redacted>`; values by value."""
    return redact_text(arg, values)


def redact_argv(argv: Iterable[str]) -> list[str]:
    values = secret_values()
    return [redact_arg(a, values) for a in argv]


# ---- what to learn -----------------------------------------------------------------------------------

def _leaves(x, secret: bool) -> Iterable[str]:
    """String leaves under a secret key (every element of lists, dicts, sweeps), and URL passwords
    anywhere."""
    if isinstance(x, Mapping):
        for k, v in x.items():
            yield from _leaves(v, secret or is_secret_key(str(k)))
    elif isinstance(x, (list, tuple, set)):
        for v in x:
            yield from _leaves(v, secret)
    elif x is not None and not isinstance(x, bool):
        s = str(getattr(x, "text", x))  # Hydra's QuotedString carries its text
        if secret:
            yield s
        for pattern in (_URL_CREDENTIALS, _URL_USER_TOKEN, _AUTH_SCHEME, _JWT):
            for m in pattern.finditer(s):
                yield m["pw"] if "pw" in pattern.groupindex else m[0]


def config_secret_values(cfg) -> list[str]:
    """Secret values in a (resolved, plain) config: under secret keys, and URL passwords."""
    return sorted(set(_leaves(cfg, False)))


def override_secret_values(arg: str) -> list[str]:
    """The secret values one command-line override carries, in every shape Hydra accepts: a sweep
    (`a,b`, `choice(...)`), quoted strings, lists, dicts (secret keys inside too), URL passwords."""
    key, sep, raw = arg.partition("=")
    if not sep or arg.startswith("-"):
        return []
    secret = is_secret_key(key)
    found: set[str] = set()
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        ov = OverridesParser.create().parse_overrides([arg])[0]
        value = ov.value()
        elements = getattr(value, "list", None)  # a choice sweep
        found.update(_leaves(elements if elements is not None else value, secret))
        if secret:
            found.update(
                ov.sweep_string_iterator() if ov.is_sweep_override() else [ov.get_value_element_as_str()]
            )
    except Exception:  # not Hydra's grammar (or no Hydra): split it by hand
        parts = [p.strip("'\"[]{}() ") for p in re.split(r"[,\s]", raw)]
        found.update(_leaves(parts, secret))
    if secret and raw:
        found.add(raw)
    return sorted(found)


def argv_secret_values(argv: Iterable[str]) -> list[str]:
    """Secret values given on the command line (see override_secret_values) plus the environment's."""
    vals = {v for a in argv for v in override_secret_values(a) if _worth_learning(v)}
    return sorted(vals | set(secret_values()), key=len, reverse=True)


class RedactingStream:
    """A text stream that redacts (every net, with the values known at the time of each write) all
    that is written through it: stdout/stderr of the CLI. A console that went away (a closed terminal
    after SIGHUP, a closed pipe) never fails the run: the record is the result, not the console.
    Everything else is delegated, so tqdm, logging and isatty checks behave as before.
    `by_name=False` leaves text alone unless it holds a known secret value: `xbench --help` prints
    xbench's own `key=value` examples as written."""

    def __init__(self, stream, values: Iterable[str] = (), by_name: bool = True):
        # A process started with its stdout or stderr closed (a detached job) has None there: the run still
        # runs and records, its console goes nowhere.
        self._stream = stream if stream is not None else open(os.devnull, "w")  # noqa: SIM115
        self._by_name = by_name
        remember(values)

    def write(self, text):
        if isinstance(text, str):
            text = redact_text(text) if self._by_name else redact_values(text)
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # EIO/EPIPE, or a closed file
            return len(text)

    def flush(self):
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)
