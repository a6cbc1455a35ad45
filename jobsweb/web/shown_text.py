"""Text that jobs wrote, as the pages show it: errors, stack traces and output (a handler's log
lines, a command's output, a ping's body), with secrets masked and terminal controls removed.

Stored text stays as it came: this is for display. Masking text is best effort, unlike masking
a payload's keys: a value is masked where a mask word names it as `key=value`, `key: value` at
the start of a line, or a JSON `"key": value` pair, and a URL's password (`scheme://user:pw@`)
always is. A secret printed any other way is shown as it was printed.
"""

import re

MASK = "••••••"
# ESC sequences as terminals read them (ECMA-48): CSI (colours, cursor moves, ESC [ ... final
# byte), OSC (titles, hyperlinks, OSC 52 which writes the clipboard: ESC ] ... BEL or ST),
# their one-byte C1 forms (0x9B, 0x9D), DCS/SOS/PM/APC strings, and the two-byte escapes left.
# A string left unterminated ends at its line's end: a stray ESC ] must not hide the lines after.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\n]*?(?:\x07|\x1b\\|\x9c|(?=\n)|$)"
    r"|\x1b[ -/]*[0-~]?")
# What is left that a terminal or a browser acts on rather than shows: C0 controls but tab and
# line break, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates
# (U+202E shows the text after it reversed).
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")
# A key, then the value masked: JSON's "key": "value" and Python's {'key': 'value'} (or a bare
# number, true, ...); key=value and key="a value" (command lines, query strings, logfmt);
# `Key: value` starting a line, to its end (an HTTP header, YAML).
_PAIRS = (
    re.compile(r"""(?P<head>(?P<quote>["'])(?P<key>[^"'\\\n]{1,100})(?P=quote)\s*:\s*)"""
               r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[^\s,{}\[\]]+)"""),
    re.compile(r"(?P<head>\b(?P<key>[\w.-]{1,100})=)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s&;,]+)"),
    re.compile(r"(?P<head>^[ \t]*(?P<key>[\w.-]{1,100}):[ \t]+)(?P<value>\S[^\n]*)", re.MULTILINE),
)


def is_secret(key, words):
    """Whether a key's value is masked: the key contains one of the mask words."""
    return any(word in str(key).lower() for word in words)


def without_controls(text):
    """`text` with terminal escape sequences and other controls removed (a lone carriage
    return, a progress bar's, becomes a line break)."""
    text = _SEQUENCES.sub("", text.replace("\r\n", "\n"))
    return _CONTROLS.sub("", text.replace("\r", "\n"))


def masked(text, words):
    """`text` with the values of key=value, `key: value` and JSON pairs whose key contains one
    of `words`, and every URL's password, replaced by the mask."""
    text = _URL_PASSWORD.sub(lambda m: f"{m[1]}{MASK}@", text)

    def hide(match):
        return f"{match['head']}{MASK}" if is_secret(match["key"], words) else match[0]

    for pattern in _PAIRS:
        text = pattern.sub(hide, text)
    return text


def shown(text, words):
    """Job-written text as a page shows it: controls removed, then secrets masked."""
    if text is None:
        return None
    return masked(without_controls(text), words)
