"""Which passwords jobsweb accepts: long enough, and not one that every guessing tool tries
first (common_passwords.txt, with the digits, symbols and l33t spelling people add to them)."""

import re
from functools import cache

from .errors import InvalidInput, clean_text
from .package_files import PACKAGE

PASSWORD_MIN_CHARS = 12
PASSWORD_MAX_CHARS = 200
_LEET = str.maketrans("0134@$57!", "oieaassti")
_AROUND = re.compile(r"^[\d\W_]+|[\d\W_]+$")  # digits and symbols before or after the word


@cache
def common_passwords():
    """The list, read once (a frozenset of lower-case entries)."""
    lines = (PACKAGE / "core" / "common_passwords.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def is_common(password):
    """True for a listed password, or one that is a listed word with digits or symbols around it
    (Password2024!), in l33t spelling (P@ssw0rd), or one character repeated."""
    lowered = password.lower()
    common = common_passwords()
    stripped = _AROUND.sub("", lowered)
    candidates = {lowered, lowered.replace(" ", ""), stripped, lowered.translate(_LEET),
                  _AROUND.sub("", lowered.translate(_LEET)), stripped.translate(_LEET)}
    return bool(candidates & common) or len(set(lowered)) <= 2 or not stripped


def check_password(password, field="password"):
    """The password, or InvalidInput naming `field`."""
    if not isinstance(password, str) or len(password) < PASSWORD_MIN_CHARS:
        raise InvalidInput(field, f"must have at least {PASSWORD_MIN_CHARS} characters")
    if len(password) > PASSWORD_MAX_CHARS:
        raise InvalidInput(field, f"must have at most {PASSWORD_MAX_CHARS} characters")
    clean_text(field, password)
    if is_common(password):
        raise InvalidInput(field, "is one of the most common passwords (or one with digits added); choose another")
    return password
