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


# The runs list's error search matches in the database (web/runlist.py), where masked() cannot
# run, so it matches against the text as these PostgreSQL expressions mask it: a cover of what
# masked() hides, never less. The search then cannot tell whether a hidden character is there
# (issue 38: `q=word=Z`, then `rd=zq`, ... read a password one character a request). They hide
# more than the pages do, so a search may miss words a page shows beside a secret; never the
# reverse. Kept next to the patterns above: a change to one is a change to the other.
# - Controls and CSI sequences are removed as without_controls() removes them; from the line of
#   any other escape sequence (OSC, DCS, ...: rare in an error) to the text's end all is hidden.
# - A URL's password: _URL_PASSWORD without its scheme (matching more places, hiding the same).
# - A mask word, any case, anywhere (in a key or not), and the key characters after it stay;
#   from there the rest of the line is hidden, the lines after it holding no letter, digit or
#   quote (JSON's `"password"\n:\n"x"`), and one more line: every place masked() can put a value.
_CSI = "(\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]"
_SQL_CONTROLS = "[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
_OTHER_SEQUENCES = "[^\n]*[\x1b\x90\x98\x9d\x9e\x9f].*$"
_SQL_URL_PASSWORD = "(://[^ \t\n\r\f\v:/@]*:)[^ \t\n\r\f\v@/]+@"
_AFTER_KEY = "[^\n]*(\n[^\n[:alnum:]\"']*)*(\n[^\n]*)?"


def search_masks(words):
    """[(PostgreSQL regular expression, replacement, flags), ...]: applied in order to a text,
    they give the text in which an error search may match (see above)."""
    masks = [("\r\n", "\n", "g"), (_CSI, "", "g"), ("\r", "\n", "g"), (_OTHER_SEQUENCES, MASK, ""), (_SQL_CONTROLS, "", "g"),
             (_SQL_URL_PASSWORD, f"\\1{MASK}@", "g")]
    if words:
        # The two letters Python's lower() turns into ASCII ones, which masked() then reads as
        # part of a mask word ('to\u212aen' is a token there) and PostgreSQL's case-insensitive
        # match, in a C-collated database, does not: folded first, here only.
        masks += [("\u212a", "k", "g"), ("\u0130", "i", "g")]
        alternatives = "|".join(re.sub(r"([^a-zA-Z0-9])", r"\\\1", word) for word in words)
        masks.append((f"((?:{alternatives})[a-zA-Z0-9_.-]*){_AFTER_KEY}", f"\\1{MASK}", "gi"))
    return masks
