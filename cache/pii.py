"""PII detection and masking for the response cache (pure: no I/O).

Detectors are regular expressions that find candidates, followed by validators that reject most false
positives (Luhn for cards, mod 97 for IBANs, MOD 11-2 and a real birth date for Chinese resident ids,
SSA rules for SSNs, ``ipaddress`` for IPs). Findings never overlap: when two detectors claim the same
characters, the more specific one (earlier in ``_PRIORITY``) wins.

Masking replaces each distinct value by a typed numbered placeholder (``<EMAIL_1>``); the same value
gets the same placeholder within one request, and numbering follows the order of first appearance, so
two requests that differ only in their PII values mask to the same body (and share a cache entry).
The answer is unmasked with the request's own mapping, never another's.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import ipaddress
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

EMAIL = "EMAIL"
PHONE = "PHONE"
CARD = "CARD"
IBAN = "IBAN"
CN_ID = "CN_ID"
SSN = "SSN"
IP = "IP"
SECRET = "SECRET"

KINDS: tuple[str, ...] = (SECRET, EMAIL, IBAN, CN_ID, CARD, SSN, IP, PHONE)
_PRIORITY = {k: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


# --- secrets ------------------------------------------------------------------------------------------
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[A-Za-z0-9+/=\s]*)"
)
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic style
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"  # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{36,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{22,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API key
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r")"
)

# --- e-mail -------------------------------------------------------------------------------------------
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)

# --- IBAN ---------------------------------------------------------------------------------------------
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
_IBAN = re.compile(r"([A-Za-z](?<![A-Za-z0-9][A-Za-z])[A-Za-z])(\d{2})((?: ?[A-Za-z0-9]){11,30})")


def _iban_ok(compact: str) -> bool:
    s = compact[4:] + compact[:4]
    digits = "".join(str(int(c, 36)) for c in s)
    return int(digits) % 97 == 1


def _find_iban(text: str) -> Iterator[Finding]:
    for m in _IBAN.finditer(text):
        country = m.group(1).upper()
        want = _IBAN_LENGTHS.get(country)
        if want is None:
            continue
        # Walk the match until `want` alphanumerics have been seen: the regex may have eaten a following
        # word ("... 0130 00 AND"), and separators are optional.
        count, end = 0, m.start()
        for i in range(m.start(), m.end()):
            if text[i] != " ":
                count += 1
                if count == want:
                    end = i + 1
                    break
        if count != want:
            continue
        if end < len(text) and text[end].isalnum():
            continue  # glued to more characters: a longer token, not this IBAN
        compact = text[m.start() : end].replace(" ", "").upper()
        if _iban_ok(compact):
            yield Finding(IBAN, m.start(), end)


# --- payment cards ------------------------------------------------------------------------------------
_CARD = re.compile(r"\d(?<![\w.-]\d)(?=[\d -]{12})\d{1,18}(?:[ -]\d{1,19})*(?!\d)")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_number_ok(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and len(set(digits)) > 1 and luhn_ok(digits)


_IBAN_HEAD = re.compile(r"[A-Za-z]{2}\d{2} ?$")


_DIGIT_RUN = re.compile(r"\d+")


def _find_card(text: str) -> Iterator[Finding]:
    for m in _CARD.finditer(text):
        s = m.group(0)
        if _IBAN_HEAD.search(text, max(0, m.start() - 5), m.start()):
            continue  # the body of an IBAN whose checksum failed
        if s.isdigit():
            if _card_number_ok(s):
                yield Finding(CARD, m.start(), m.end())
            continue
        # Digit groups and the one-character separators between them: a card is a window of consecutive
        # groups with a single separator kind and 13-19 digits; take the longest valid one, then go on.
        spans = [(g.start(), g.end()) for g in _DIGIT_RUN.finditer(s)]
        groups = [s[x:y] for x, y in spans]
        seps = [s[spans[k][1]] for k in range(len(spans) - 1)]
        i = 0
        while i < len(groups) - 1:
            j, total = i, len(groups[i])
            while j + 1 < len(groups) and total + len(groups[j + 1]) <= 19 and seps[j] == seps[i]:
                j += 1
                total += len(groups[j])
            hit = -1
            for k in range(j, i, -1):
                digits = "".join(groups[i : k + 1])
                if len(digits) >= 13 and _card_number_ok(digits):
                    hit = k
                    break
            if hit >= 0:
                yield Finding(CARD, m.start() + spans[i][0], m.start() + spans[hit][1])
                i = hit + 1
            else:
                i += 1


# --- Chinese resident identity card (GB 11643-1999) -------------------------------------------------
_CN_ID = re.compile(r"[1-8](?<![0-9A-Za-z][1-8])\d{16}[0-9Xx](?![0-9A-Za-z])")
_CN_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_CHECK = "10X98765432"


def cn_id_ok(s: str) -> bool:
    if len(s) != 18 or not s[:17].isdigit():
        return False
    try:
        born = _dt.date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    if born.year < 1900 or born > _dt.date.today():
        return False
    total = sum(int(c) * w for c, w in zip(s[:17], _CN_WEIGHTS, strict=True))
    return _CN_CHECK[total % 11] == s[17].upper()


def _find_cn_id(text: str) -> Iterator[Finding]:
    for m in _CN_ID.finditer(text):
        if cn_id_ok(m.group(0)):
            yield Finding(CN_ID, m.start(), m.end())


# --- US social security number ------------------------------------------------------------------------
_SSN = re.compile(r"(\d{3})(?<![\d-]\d{3})([- ])(\d{2})\2(\d{4})(?![\d-])")
_SSN_INVALID = {"078051120", "219099999", "123456789"}


def ssn_ok(area: str, group: str, serial: str) -> bool:
    a = int(area)
    if a == 0 or a == 666 or a >= 900:
        return False
    if group == "00" or serial == "0000":
        return False
    return area + group + serial not in _SSN_INVALID


def _find_ssn(text: str) -> Iterator[Finding]:
    for m in _SSN.finditer(text):
        if ssn_ok(m.group(1), m.group(3), m.group(4)):
            yield Finding(SSN, m.start(), m.end())


# --- IP addresses -------------------------------------------------------------------------------------
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(
    r"[0-9A-Fa-f:](?<![\w:.][\s\S])(?:(?<=:)|(?<=[0-9A-Fa-f])[0-9A-Fa-f]{0,3}:)(?:[0-9A-Fa-f]{0,4}:){1,6}"
    r"(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?:%[\w.]+)?(?![\w:]|\.\w)"
)
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")  # every IPv6 address has two colons this close


def _ipv6_windows(text: str) -> list[tuple[int, int]]:
    spans: list[list[int]] = []
    for h in _IPV6_HINT.finditer(text):
        a, b = max(0, h.start() - 40), h.end() + 45
        if spans and a <= spans[-1][1]:
            spans[-1][1] = b
        else:
            spans.append([a, b])
    return [(a, min(b, len(text))) for a, b in spans]


def _find_ipv4(text: str) -> Iterator[Finding]:
    if "." in text:
        for m in _IPV4.finditer(text):
            try:
                ipaddress.IPv4Address(m.group(0))
            except ValueError:
                continue
            yield Finding(IP, m.start(), m.end())


def _find_ipv6(text: str) -> Iterator[Finding]:
    """Runs on the whole text (an address may have no decimal digit: ``fe80::abcd``), gated by hints."""
    for a, b in _ipv6_windows(text):
        for m in _IPV6.finditer(text, a, b):
            s = m.group(0)
            colons = s.count(":")
            if colons < 2 or ("::" not in s and colons < 6) or sum(c.isalnum() for c in s) < 2:
                continue  # without "::" an address has 8 groups (or 6 and an IPv4 tail)
            try:
                ipaddress.IPv6Address(s.split("%", 1)[0])
            except ValueError:
                continue
            yield Finding(IP, m.start(), m.end())


# --- phone numbers ------------------------------------------------------------------------------------
_PHONE_PATTERNS = (
    # Each pattern starts with one character class and checks what precedes the match right after it
    # (``(?<!X[\s\S])``): the regex engine can then skip non-candidate positions in C.
    # international: +CC then groups (E.164: at most 15 digits)
    re.compile(r"\+(?<![\w+]\+)\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,6}(?!\w)"),
    # North American: (415) 555-2671, 415-555-2671, 415.555.2671, optionally 1- in front
    re.compile(
        r"[(\d](?<![\w(+-][\s\S])(?<!\d[ .][\s\S])"
        r"(?:(?<=1)[ .-](?:\(\d{3}\) ?|\d{3}[ .-])|(?<=\()\d{3}\) ?|(?<=\d)\d{2}[ .-])"
        r"\d{3}[ .-]\d{4}(?![\w-])"
    ),
    # trunk prefix 0 with separators (UK, FR, DE, IT, ...): 020 7946 0958, 06 12 34 56 78, (030) 1234567
    re.compile(
        r"[(0](?<![\w(+.-][\s\S])(?<!\d [\s\S])(?:(?<=\()0[1-9]\d{0,3}\) ?|(?<=0)[1-9]\d{0,3}[ /-])"
        r"\d{2,8}(?:[ -]\d{2,4}){0,3}(?![\w-])"
    ),
    # Chinese mobile numbers: 138 1234 5678 or 13812345678
    re.compile(r"1(?<![\d+-]1)(?<!\d 1)[3-9]\d(?:[ -]?\d{4}){2}(?![\d-])"),
)


_DATE_START = re.compile(r"\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}")


def _phone_ok(s: str, pattern_index: int) -> bool:
    digits = "".join(c for c in s if c.isdigit())
    if pattern_index == 0:
        return 8 <= len(digits) <= 15
    if pattern_index == 1:
        core = digits[-10:]
        return core[0] in "23456789" and core[3] in "23456789"
    if pattern_index == 2:
        seps = {c for c in s.replace(") ", ")") if c in " /-"}
        return 9 <= len(digits) <= 12 and len(seps) <= 1 and _DATE_START.match(s) is None
    return len(digits) == 11


def _find_phone(text: str) -> Iterator[Finding]:
    for idx, pattern in enumerate(_PHONE_PATTERNS):
        for m in pattern.finditer(text):
            if _phone_ok(m.group(0), idx):
                yield Finding(PHONE, m.start(), m.end())


def _find_email(text: str) -> Iterator[Finding]:
    if "@" in text:
        for m in _EMAIL.finditer(text):
            yield Finding(EMAIL, m.start(), m.end())


def _find_secret(text: str) -> Iterator[Finding]:
    if "-----BEGIN" in text:
        for m in _PRIVATE_KEY.finditer(text):
            yield Finding(SECRET, m.start(), m.end())
    for m in _TOKENS.finditer(text):
        yield Finding(SECRET, m.start(), m.end())


_NUMERIC_DETECTORS = (_find_iban, _find_card, _find_cn_id, _find_ssn, _find_ipv4, _find_phone)
_SECRET_MARKERS = (
    "sk-",
    "sk_",
    "rk_",
    "pk_",
    "AKIA",
    "ASIA",
    "gh",
    "github_pat_",
    "xox",
    "AIza",
    "glpat-",
    "eyJ",
)
# Every numeric finding lies within this many characters of a digit (IBAN country codes, "+", "(0",
# IPv6 hex groups), and the regexes look at most 2 characters around a match: windows with this margin
# around the digits give the same findings as scanning the whole text.
_MARGIN = 16
_JOIN = 48


_DIGIT_CLUSTER = re.compile(rf"\d(?:\D{{0,{_JOIN}}}\d)*")


def _digit_windows(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` around its digits (runs closer than ``_JOIN`` merged, found in one C pass):
    the only places numeric PII can be."""
    n = len(text)
    return [(max(0, m.start() - _MARGIN), min(n, m.end() + _MARGIN)) for m in _DIGIT_CLUSTER.finditer(text)]


def _candidates(text: str, windowed: bool) -> list[Finding]:
    found: list[Finding] = []
    if any(marker in text for marker in _SECRET_MARKERS) or "-----BEGIN" in text:
        found.extend(_find_secret(text))
    found.extend(_find_email(text))
    if ":" in text:
        found.extend(_find_ipv6(text))
    if not windowed:
        for det in _NUMERIC_DETECTORS:
            found.extend(det(text))
        return found
    for a, b in _digit_windows(text):
        sub = text[a:b]
        for det in _NUMERIC_DETECTORS:
            for f in det(sub):
                found.append(Finding(f.kind, f.start + a, f.end + a))
    return found


def detect(text: str, *, windowed: bool = True) -> list[Finding]:
    """Non-overlapping findings in ``text``, sorted by position.

    ``windowed`` (the default) runs the numeric detectors only on windows around digits, which is the
    same result at a fraction of the cost on prose; ``windowed=False`` scans everything (the reference
    the tests compare against).
    """
    if not text:
        return []
    candidates = _candidates(text, windowed)
    if not candidates:
        return []
    # Dedupe (windows may overlap a finding twice), then take the most specific kind first.
    candidates = sorted(set(candidates), key=lambda f: (_PRIORITY[f.kind], f.start, -(f.end - f.start)))
    starts: list[int] = []
    taken: list[Finding] = []
    for f in candidates:
        i = bisect.bisect_right(starts, f.start)
        if i > 0 and taken[i - 1].end > f.start:
            continue  # overlaps the finding that starts before it
        if i < len(taken) and taken[i].start < f.end:
            continue  # overlaps the finding that starts after it
        starts.insert(i, f.start)
        taken.insert(i, f)
    return taken


# --- request traversal --------------------------------------------------------------------------------
def _request_texts(body: Mapping[str, Any]) -> Iterator[str]:
    """Every text of a request that the model sees (read only)."""
    for _path, value in _text_slots(body):
        yield value


def _text_slots(body: Mapping[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, text) for every text the model sees: message contents (plain and text parts), tool call
    arguments, prompt strings, suffix."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                continue
            content = msg.get("content")
            if isinstance(content, str):
                yield ("messages", i, "content"), content
            elif isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        yield ("messages", i, "content", j, "text"), part["text"]
            if isinstance(msg.get("reasoning_content"), str):
                yield ("messages", i, "reasoning_content"), msg["reasoning_content"]
            calls = msg.get("tool_calls")
            if isinstance(calls, list):
                for k, call in enumerate(calls):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        yield ("messages", i, "tool_calls", k, "function", "arguments"), fn["arguments"]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        yield ("prompt",), prompt
    elif isinstance(prompt, list):
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                yield ("prompt", i), p
    if isinstance(body.get("suffix"), str):
        yield ("suffix",), body["suffix"]


def find_pii_in_request(body: Mapping[str, Any]) -> set[str]:
    """Kinds of PII found in the texts the model would see."""
    kinds: set[str] = set()
    for text in _request_texts(body):
        kinds.update(f.kind for f in detect(text))
    return kinds


def find_pii_in_response(response: Mapping[str, Any]) -> set[str]:
    """Kinds of PII in a non-stream response's generated texts (an answer with PII is not stored)."""
    kinds: set[str] = set()
    for text in response_texts(response):
        kinds.update(f.kind for f in detect(text))
    return kinds


def response_texts(response: Mapping[str, Any]) -> Iterator[str]:
    for choice in response.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            yield choice["text"]
        msg = choice.get("message")
        if isinstance(msg, dict):
            for key in ("content", "reasoning_content", "refusal"):
                if isinstance(msg.get(key), str):
                    yield msg[key]
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    yield fn["arguments"]


# --- masking ------------------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*)_(\d{1,6})>")
_MAX_PLACEHOLDER_LEN = 24


@dataclass
class PiiMapping:
    """Placeholders of one request and the values they stand for. Never stored, never logged."""

    values: dict[str, str] = field(default_factory=dict)  # placeholder -> original value
    _by_value: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # never print the values
        return f"PiiMapping({len(self.values)} placeholders)"

    def placeholder(self, kind: str, value: str) -> str:
        ph = self._by_value.get((kind, value))
        if ph is None:
            n = self._counts.get(kind, 0) + 1
            self._counts[kind] = n
            ph = f"<{kind}_{n}>"
            self._by_value[(kind, value)] = ph
            self.values[ph] = value
        return ph

    def __bool__(self) -> bool:
        return bool(self.values)


def mask_text(text: str, mapping: PiiMapping) -> str:
    findings = detect(text)
    if not findings:
        return text
    out, pos = [], 0
    for f in findings:
        out.append(text[pos : f.start])
        out.append(mapping.placeholder(f.kind, text[f.start : f.end]))
        pos = f.end
    out.append(text[pos:])
    return "".join(out)


def _set_path(root: Any, path: tuple[Any, ...], value: str) -> None:
    node = root
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def _copy_path(root: dict[str, Any], path: tuple[Any, ...]) -> None:
    """Copy the containers along ``path`` so that writing at its end does not touch the caller's body."""
    node: Any = root
    for step in path[:-1]:
        child = node[step]
        child = dict(child) if isinstance(child, dict) else list(child)
        node[step] = child
        node = child


def mask_request(body: Mapping[str, Any]) -> tuple[dict[str, Any], PiiMapping]:
    """A copy of ``body`` with every PII value replaced by its placeholder, and the mapping back.

    The input is not modified. Tool-call argument strings are JSON: a masked value there is replaced by
    a placeholder that needs no escaping, so the arguments stay valid JSON.
    """
    mapping = PiiMapping()
    out: dict[str, Any] = dict(body)
    for path, text in list(_text_slots(body)):
        masked = mask_text(text, mapping)
        if masked != text:
            _copy_path(out, path)
            _set_path(out, path, masked)
    return out, mapping


def _replacement(mapping: PiiMapping, json_escape: bool):
    def repl(m: re.Match[str]) -> str:
        value = mapping.values.get(m.group(0))
        if value is None:
            return m.group(0)
        return orjson.dumps(value).decode()[1:-1] if json_escape else value

    return repl


def unmask_text(text: str, mapping: PiiMapping, *, json_escape: bool = False) -> str:
    """Put the request's own values back; unknown placeholders are left alone."""
    if not mapping or "<" not in text:
        return text
    return _PLACEHOLDER.sub(_replacement(mapping, json_escape), text)


def unmask_response(response: dict[str, Any], mapping: PiiMapping) -> dict[str, Any]:
    """A copy of a non-stream response with placeholders replaced in every generated text."""
    if not mapping:
        return response
    out = dict(response)
    choices = []
    for choice in response.get("choices") or ():
        if not isinstance(choice, dict):
            choices.append(choice)
            continue
        c = dict(choice)
        if isinstance(c.get("text"), str):
            c["text"] = unmask_text(c["text"], mapping)
        msg = c.get("message")
        if isinstance(msg, dict):
            msg = dict(msg)
            for key in ("content", "reasoning_content", "refusal"):
                if isinstance(msg.get(key), str):
                    msg[key] = unmask_text(msg[key], mapping)
            if isinstance(msg.get("tool_calls"), list):
                msg["tool_calls"] = [_unmask_call(call, mapping) for call in msg["tool_calls"]]
            c["message"] = msg
        choices.append(c)
    out["choices"] = choices
    return out


def _unmask_call(call: Any, mapping: PiiMapping) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    fn = dict(call["function"])
    if isinstance(fn.get("arguments"), str):
        fn["arguments"] = unmask_text(fn["arguments"], mapping, json_escape=True)
    return {**call, "function": fn}


_PARTIAL = re.compile(r"<[A-Z]?[A-Z_]*(?:_\d{0,6})?$")


class StreamUnmasker:
    """Unmasks one text stream (one field of one choice) delta by delta.

    A placeholder may be split across deltas (``"<EMA"`` then ``"IL_1> hi"``): ``feed`` holds back a
    tail that could still become a placeholder and releases it once it is decided. ``flush`` returns
    whatever is held at the end of the stream.
    """

    def __init__(self, mapping: PiiMapping, *, json_escape: bool = False):
        self.mapping = mapping
        self.json_escape = json_escape
        self._held = ""

    def feed(self, delta: str) -> str:
        buf = self._held + delta
        self._held = ""
        cut = buf.rfind("<")
        if cut != -1 and len(buf) - cut <= _MAX_PLACEHOLDER_LEN and _PARTIAL.fullmatch(buf, cut) is not None:
            buf, self._held = buf[:cut], buf[cut:]
        return unmask_text(buf, self.mapping, json_escape=self.json_escape)

    def flush(self) -> str:
        rest, self._held = self._held, ""
        return unmask_text(rest, self.mapping, json_escape=self.json_escape)


class ChunkUnmasker:
    """Unmasks parsed SSE chunks (``chat.completion.chunk`` or ``text_completion``) of one stream.

    Keeps one ``StreamUnmasker`` per (choice, field); text held back is released in a later chunk of the
    same choice, at the latest in the chunk that carries its ``finish_reason``.
    """

    def __init__(self, mapping: PiiMapping):
        self.mapping = mapping
        self._streams: dict[tuple[Any, ...], StreamUnmasker] = {}

    def _stream(self, key: tuple[Any, ...], json_escape: bool = False) -> StreamUnmasker:
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = StreamUnmasker(self.mapping, json_escape=json_escape)
        return s

    def process(self, chunk: dict[str, Any]) -> dict[str, Any]:
        if not self.mapping or not isinstance(chunk.get("choices"), list):
            return chunk
        out = dict(chunk)
        out["choices"] = [self._choice(c) if isinstance(c, dict) else c for c in chunk["choices"]]
        return out

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        idx = choice.get("index", 0)
        final = choice.get("finish_reason") is not None
        c = dict(choice)
        if "text" in c or "delta" not in c:
            s = self._stream((idx, "text"))
            text = s.feed(c.get("text") or "")
            c["text"] = text + (s.flush() if final else "")
            return c
        delta = dict(c.get("delta") or {})
        for key in ("content", "reasoning_content"):
            if isinstance(delta.get(key), str) or (final and (idx, key) in self._streams):
                s = self._stream((idx, key))
                text = s.feed(delta.get(key) or "")
                delta[key] = text + (s.flush() if final else "")
        if isinstance(delta.get("tool_calls"), list):
            calls = []
            for call in delta["tool_calls"]:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    s = self._stream((idx, "tool", call.get("index", 0)), json_escape=True)
                    call = {**call, "function": {**fn, "arguments": s.feed(fn["arguments"])}}
                calls.append(call)
            delta["tool_calls"] = calls
        if final:
            held = [
                (key, s.flush()) for key, s in self._streams.items() if key[0] == idx and key[1] == "tool"
            ]
            extra = [{"index": key[2], "function": {"arguments": text}} for key, text in held if text]
            if extra:
                delta["tool_calls"] = [*(delta.get("tool_calls") or []), *extra]
        c["delta"] = delta
        return c
