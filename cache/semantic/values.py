"""Value normalisers: how a captured slot value is cleaned before it enters a key (pure).

Each is a plain ``str -> str`` function registered by name in ``NORMALISERS``; a regex extractor applies
the ones its policy names, in order. A normaliser that cannot make sense of a value returns ``""`` and
the slot counts as not found (the fingerprint is then incomplete: a wrong key is worse than none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,]\d+)*)$")


def number(value: str) -> str:
    """``1,000`` → ``1000``; ``6.10`` → ``6.1``; ``007`` → ``7``; anything else → ``""``."""
    v = value.strip().replace(" ", "")
    if not _NUMBER.match(v):
        return ""
    if v.count(",") and (v.count(".") or all(len(p) == 3 for p in v.split(",")[1:])):
        v = v.replace(",", "")  # thousands separators
    else:
        v = v.replace(",", ".")  # a decimal comma
    try:
        d = Decimal(v)
    except InvalidOperation:
        return ""
    text = format(d.normalize(), "f")
    return "0" if text in ("-0", "+0") else text


NORMALISERS: dict[str, Callable[[str], str]] = {
    "lower": str.lower,
    "upper": str.upper,
    "digits": lambda v: "".join(c for c in v if c.isdigit()),
    "alnum": lambda v: "".join(c for c in v if c.isalnum()),
    "nospace": lambda v: "".join(v.split()),
    "number": number,
}


def apply(value: str, steps: list[str]) -> str:
    for step in steps:
        value = NORMALISERS[step](value)
    return value.strip()
