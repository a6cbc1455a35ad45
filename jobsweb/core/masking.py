"""Masking: the one rule for every text that a viewer, a log reader or a tracing backend reads
(pages, the runs list's error search, incident summaries and notifications, log lines, Sentry
events, OpenTelemetry spans, CLI output). docs/MASKING.md lists the places.

A payload's keys: a key holding one of the mask words (JOBSWEB_MASK_KEYS, any case, `-` read as
`_`) has its value masked, whatever it holds. Text (an error, a stack, output): best effort, a
value is masked where a mask word is in its key as `key=value`, `Key: value` starting a line, or
a JSON or Python `"key": value` pair, and a URL's password (`://user:pw@`) always is. A secret
printed any other way is shown as it was printed.

One table of steps (STEPS), each a regular expression and its replacement written in the subset
that Python's `re` and PostgreSQL's regular expressions (AREs) read alike, so the error search
masks in SQL exactly as the pages mask in Python (tests/test_masking_rule.py checks that the two
give the same text). The subset: no flags (the case of a mask word is a bracket per letter), no
`\\s`, `\\w`, `\\b`, `.`, `$` or named groups, characters outside letters and digits written as
`\\uXXXX`, and every step's match unique where it starts (alternatives begin with different
characters, each repetition stops at a character the next part cannot take), since Python takes
the first alternative that matches and PostgreSQL the longest.
"""

import functools
import re

MASK = "••••••"
# JOBSWEB_MASK_KEYS's default (core/settings.py).
MASK_WORDS = ("password", "passwd", "passphrase", "pwd", "token", "secret", "api_key", "apikey", "access_key",
              "accesskey", "auth", "bearer", "signature", "credential", "private_key", "dsn", "cookie", "session")


def _chars(text):
    """`text` as pattern characters: letters and digits as they are, the rest \\uXXXX."""
    return "".join(c if c.isascii() and c.isalnum() else _escape(c) for c in text)


def _escape(char):
    return f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}"


def _not(chars):
    """A bracket of every character but `chars` (each written \\uXXXX)."""
    return "[^" + "".join(_escape(c) for c in chars) + "]"


# Whitespace as both engines read it (Python's \s also takes Unicode spaces, PostgreSQL's
# [[:space:]] depends on the locale): the ASCII six.
_SPACE = " \t\n\r\f\v"
_ASCII = "".join(map(chr, range(1, 128)))
# A key's characters in key=value and `Key: value`: letters, digits, `_`, `.`, `-` and any
# character past ASCII (a key in another script).
_KEY = _not(c for c in _ASCII if not (c.isalnum() or c in "_.-"))
# A quoted key's characters: any but its quote and a line break, a backslash escaping the next
# one (json.dumps writes a key in another script as \u043f...).
_QUOTED_KEY = {q: f"(?:{_not(q + chr(92) + chr(10))}|\\u005c[^\\u000a])" for q in "\"'"}
_URL_USER = _not(_SPACE + ":/@")
_URL_PASSWORD = _not(_SPACE + "@/")

# Terminal escape sequences as terminals read them (ECMA-48), then the controls left; C0 but tab
# and line break, DEL, C1, and the bidirectional embeddings, overrides and isolates (U+202E
# shows the text after it reversed). NUL, which PostgreSQL's text never holds, is removed
# before these in Python.
CONTROL_STEPS = (
    (_chars("\r\n"), "\n"),
    # CSI (colours, cursor moves): ESC [ or 0x9B, parameters, intermediates, a final byte.
    (r"(?:\u001b\u005b|\u009b)[\u0030-\u003f]*[\u0020-\u002f]*[\u0040-\u007e]", ""),
    # OSC (titles, hyperlinks, OSC 52 which writes the clipboard), DCS, SOS, PM, APC and their
    # one-byte C1 forms, to BEL, ST or ESC \; one left open ends at its line's end.
    (r"(?:\u001b[\u005d\u0050\u0058\u005e\u005f]|[\u009d\u0090\u0098\u009e\u009f])"
     r"[^\u000a\u0007\u001b\u009c]*(?:\u0007|\u001b\u005c|\u009c)?", ""),
    (_chars("\r"), "\n"),
    # The two-byte escapes left.
    (r"\u001b[\u0020-\u002f]*[\u0030-\u007e]?", ""),
    (r"[\u0001-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]", ""),
)


def fold(word):
    """A mask word as compared: lower case, `-` read as `_`."""
    return word.strip().lower().replace("-", "_")


# Letters a mask word's letter also matches: its upper case, and the few that Python's lower()
# turns into that ASCII letter or that read as it (KELVIN SIGN, the dotted capital I, long s).
_ALSO = {"k": "\u212a", "i": "\u0130\u0131", "s": "\u017f"}


def _word(word):
    out = []
    for char in fold(word):
        if char == "_":
            out.append(r"[\u002d\u005f]")
        elif char.isalpha():
            upper = char.upper() if len(char.upper()) == 1 else ""  # not ß's SS
            out.append("[" + _chars("".join(dict.fromkeys(char + upper + _ALSO.get(char, "")))) + "]")
        else:
            out.append(_chars(char))
    return "".join(out)


@functools.lru_cache(maxsize=16)
def words_pattern(words):
    """`(?:...)`: any of the mask words `words` (a tuple), any case, `-` or `_` alike; None
    when there are none."""
    folded = sorted({fold(w) for w in words} - {""})
    return "(?:" + "|".join(map(_word, folded)) + ")" if folded else None


def _value(stop):
    """A value after a key: a quoted string (to its quote, or its line's end when left open), a
    {...} or [...] (to the first closing one, or the text's end), or characters up to `stop`."""
    s = "".join(dict.fromkeys(stop + "\"'{["))
    return (r'"(?:[^\u0022\u005c\u000a]|\u005c[^\u000a])*\u0022?'
            r"|'(?:[^\u0027\u005c\u000a]|\u005c[^\u000a])*\u0027?"
            r"|\u007b[^\u007b\u007d]*\u007d?|\u005b[^\u005b\u005d]*\u005d?"
            f"|{_not(s)}{_not(stop)}*")


@functools.lru_cache(maxsize=16)
def mask_steps(words):
    """[(pattern, replacement), ...] that mask the values of `words` (a tuple) and URL
    passwords, in this order: a JSON key shaped like a URL is read as a key before its URL is
    masked, and a URL's password holding `=` as a password before key=value is read."""
    mask = f"\\1{MASK}"
    url = (f"(\\u003a\\u002f\\u002f{_URL_USER}*\\u003a){_URL_PASSWORD}+\\u0040", f"{mask}@")
    w = words_pattern(words)
    if not w:
        return (url,)
    space = "[" + _chars(_SPACE) + "]"
    # Costs, measured on 5,000 errors in PostgreSQL: a quoted key's word looked for ahead (at
    # each quote) rather than inside the key's repetition cost a third; key=value's look behind
    # (a key starts after a character no key holds) keeps Python from trying each of a long run's
    # characters as a key's start (3-5 times slower without).
    quoted = "|".join(f"{_chars(q)}(?={_QUOTED_KEY[q]}*{w}){_QUOTED_KEY[q]}*{_chars(q)}" for q in "\"'")
    return (
        # "key": value and 'key': value (JSON, a Python dict's repr)
        (f"((?:{quoted}){space}*\\u003a{space}*)(?:{_value(_SPACE + ',}]')})", mask),
        url,
        # key=value (command lines, query strings, logfmt)
        (f"((?<!{_KEY}){_KEY}*{w}{_KEY}*\\u003d)(?:{_value(_SPACE + '&;,')})", mask),
        # `Key: value` starting a line, to its end (an HTTP header, YAML; `X-Api-Key:k3y` too);
        # a line also starts after a written \n, indented by written \t too (a repr's, a JSON string's)
        (f"((?:^|\\u000a|\\u005c\\u006e)(?:[\\u0020\\u0009]|\\u005c\\u0074)*{_KEY}*{w}{_KEY}*\\u003a[\\u0020\\u0009]*)"
         f"[^{_chars(_SPACE)}][^\\u000a]*", mask),
    )


@functools.lru_cache(maxsize=64)
def _compiled(pattern):
    return re.compile(pattern)


def _apply(steps, text):
    for pattern, replacement in steps:
        text = _compiled(pattern).sub(replacement, text)
    return text


def _words(words):
    return tuple(words or ())


def without_controls(text):
    """`text` with terminal escape sequences and other controls removed (a lone carriage
    return, a progress bar's, becomes a line break)."""
    return _apply(CONTROL_STEPS, text.replace("\x00", ""))


def masked(text, words):
    """`text` with the values of key=value, `Key: value` and JSON pairs whose key holds one of
    `words`, and every URL's password, replaced by the mask."""
    return _apply(mask_steps(_words(words)), text)


def shown(text, words):
    """Text as anyone but its writer reads it: controls removed, then secrets masked."""
    if text is None:
        return None
    return masked(without_controls(str(text)), words)


def one_line(text, words, limit):
    """`text` as shown(), its whitespace runs as one space (after masking: `Key: value` is read
    per line), cut to `limit` characters with an ellipsis."""
    text = " ".join(shown(text, words).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def sql_steps(words):
    """STEPS for PostgreSQL: [(pattern, replacement, flags), ...], applied in order with
    regexp_replace they give the text shown() gives."""
    return [(p, r, "g") for p, r in (*CONTROL_STEPS, *mask_steps(_words(words)))]


def is_secret(key, words):
    """Whether a key's value is masked: the key holds one of the mask words."""
    pattern = words_pattern(_words(words))
    return pattern is not None and _compiled(pattern).search(str(key)) is not None


SECRET_MIN_CHARS = 4  # a shorter value under a secret key ("1", "yes") is not looked for in texts


def secret_values(value, words, under=False):
    """The texts (and numbers, as text) of a payload that lie under a secret key at any depth,
    SECRET_MIN_CHARS long or longer, longest first: what a tracing backend must not receive
    even where no key names it (a handler's local `pw = ctx.payload["password"]`)."""
    found = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found.update(secret_values(item, words, under or is_secret(key, words)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.update(secret_values(item, words, under))
    elif under and value is not None and not isinstance(value, bool) and len(str(value)) >= SECRET_MIN_CHARS:
        found.add(str(value))
    return sorted(found, key=len, reverse=True)


def masked_value(value, words, secrets=()):
    """A payload, an event or a span's data with secret keys' values masked at any depth and every
    text in it as shown(), with each of `secrets` (secret_values) masked wherever it appears."""
    if isinstance(value, dict):
        return {key: MASK if is_secret(key, words) else masked_value(item, words, secrets)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked_value(item, words, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return shown(value, words)
    return value
