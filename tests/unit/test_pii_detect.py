"""PII detectors: a corpus of true positives and near-miss negatives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.pii import (
    CARD,
    CN_ID,
    EMAIL,
    IBAN,
    IP,
    PHONE,
    SECRET,
    SSN,
    cn_id_ok,
    detect,
    find_pii_in_request,
    find_pii_in_response,
    luhn_ok,
)

POSITIVES: list[tuple[str, str, str]] = [
    # (kind, the value, surrounding text with {} where the value goes)
    (EMAIL, "john.doe+tag@example.co.uk", "write to {} today"),
    (EMAIL, "a_b@sub.domain.io", "<{}>"),
    (PHONE, "+44 20 7946 0958", "call {} now"),
    (PHONE, "+1 (415) 555-2671", "call {}."),
    (PHONE, "+8613812345678", "tel:{}"),
    (PHONE, "(415) 555-2671", "office {} ext"),
    (PHONE, "415-555-2671", "cell: {}"),
    (PHONE, "020 7946 0958", "London {}"),
    (PHONE, "06 12 34 56 78", "portable {}"),
    (PHONE, "030 12345678", "Berlin {}"),
    (PHONE, "138 1234 5678", "手机 {}"),
    (PHONE, "13812345678", "手机{}。"),
    (CARD, "4111 1111 1111 1111", "card {} exp 12/29"),
    (CARD, "4111-1111-1111-1111", "card {}"),
    (CARD, "5555555555554444", "mc {}"),
    (CARD, "378282246310005", "amex {}"),
    (CARD, "6011 1111 1111 1117", "discover {}"),
    (IBAN, "DE89 3704 0044 0532 0130 00", "IBAN {} AND more"),
    (IBAN, "GB82WEST12345698765432", "iban: {}"),
    (IBAN, "FR1420041010050500013M02606", "{}"),
    (IBAN, "NO9386011117947", "konto {}"),
    (CN_ID, "11010519491231002X", "身份证号 {}"),
    (CN_ID, "440524198001010013", "id {}"),
    (SSN, "536-22-1234", "ssn {}"),
    (SSN, "536 22 1234", "ssn {}"),
    (IP, "192.168.1.10", "host {}."),
    (IP, "8.8.8.8", "dns={}"),
    (IP, "2001:db8::1", "v6 {} ok"),
    (IP, "fe80::1ff:fe23:4567:890a%eth0", "link {}"),
    (IP, "::ffff:192.0.2.128", "mapped {}"),
    (SECRET, "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "OPENAI_API_KEY={}"),
    (SECRET, "AKIAIOSFODNN7EXAMPLE", "aws {}"),
    (SECRET, "ghp_" + "A1b2" * 9, "token {}"),
    (SECRET, "xoxb-123456789012-abcdefghij", "slack {}"),
    (
        SECRET,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Authorization: Bearer {}",
    ),
    (
        SECRET,
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/=\n-----END RSA PRIVATE KEY-----",
        "key:\n{}\nthanks",
    ),
    (SECRET, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA", "truncated {}"),
]

NEGATIVES: list[str] = [
    "card 4111 1111 1111 1112",  # bad Luhn
    "number 4111111111111112",  # bad Luhn
    "order 1234567890123456",  # bad Luhn, plain number
    "zeros 0000 0000 0000 0000",  # Luhn-valid but not a card
    "IBAN DE89 3704 0044 0532 0130 01",  # bad checksum
    "GB82WEST12345698765433",  # bad checksum
    "XX89370400440532013000",  # unknown country
    "DE89 3704 0044 0532 0130",  # wrong length for DE
    "id 110105194912310021",  # bad check digit
    "id 11010519491332002X",  # month 13
    "id 11010518000101002X",  # born 1800
    "ssn 000-12-3456 666-12-3456 900-12-3456 536-00-1234 536-22-0000",
    "ip 256.1.1.1 and 1.2.3 and 192.168.1.1.5 and 01.02.03.004",
    "time 12:30:45 and ratio 3:4 and std::vector and a::b::c",
    "plain numbers 12345678 123456789 1234567890 3.14159 1e10 -42",
    "dates 2024-01-15 15/01/2024 01.02.2024 01-02-2024 2024/01/15 Jan 15 2024",
    "version 1.2.3 build 20240115 port 8080 pid 12345",
    "NANP with bad exchange 415-155-2671",
    "user@localhost is not an address, nor is @handle or a@b",
    "sk-short and AKIA123 and ghp_short",
    "a 12-digit order 123456789012 and 11 digits 12345678901",
]


@pytest.mark.parametrize(
    ("kind", "value", "template"), POSITIVES, ids=[f"{k}:{v[:18]}" for k, v, _ in POSITIVES]
)
def test_true_positives(kind: str, value: str, template: str) -> None:
    text = template.format(value)
    findings = detect(text)
    start = text.index(value)
    assert [(f.kind, f.start, f.end) for f in findings] == [(kind, start, start + len(value))]


@pytest.mark.parametrize("text", NEGATIVES)
def test_near_miss_negatives(text: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in detect(text)] == []


def test_findings_do_not_overlap_and_are_sorted() -> None:
    text = (
        "mail a@b.io, card 4111 1111 1111 1111, ip 10.0.0.1, ssn 536-22-1234, "
        "id 11010519491231002X, phone +44 20 7946 0958, iban GB82WEST12345698765432"
    )
    findings = detect(text)
    assert [f.kind for f in findings] == [EMAIL, CARD, IP, SSN, CN_ID, PHONE, IBAN]
    for a, b in itertools.pairwise(findings):
        assert a.end <= b.start


def test_validators() -> None:
    assert luhn_ok("79927398713") and not luhn_ok("79927398710")
    assert cn_id_ok("11010519491231002X") and cn_id_ok("11010519491231002x")
    assert not cn_id_ok("11010519490229002X")  # 1949 is not a leap year


def test_find_pii_in_request_covers_every_text_the_model_sees() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "no pii here"},
            {"role": "user", "content": [{"type": "text", "text": "mail me at x@y.org"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"ip": "10.1.2.3"}'},
                    }
                ],
            },
            {"role": "user", "content": "card 4111 1111 1111 1111"},
        ],
    }
    assert find_pii_in_request(body) == {EMAIL, IP, CARD}
    assert find_pii_in_request({"prompt": ["hello", "ssn 536-22-1234"]}) == {SSN}
    assert find_pii_in_request({"prompt": "nothing to see", "messages": "junk"}) == set()
    resp = {"object": "chat.completion", "choices": [{"message": {"content": "reach +44 20 7946 0958"}}]}
    assert find_pii_in_response(resp) == {PHONE}


_FRAGMENTS = [value for _, value, _ in POSITIVES] + [
    " ",
    "-",
    ".",
    ":",
    "::",
    "(",
    ")",
    "+",
    "0",
    "1",
    "42",
    "2024-01-15",
    "12:30:45",
    "abc",
    "DE",
    "\n",
    "x" * 30,
    "5" * 20,
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=25))
def test_windowed_scan_finds_exactly_what_a_full_scan_finds(parts: list[str]) -> None:
    text = "".join(parts)
    assert detect(text) == detect(text, windowed=False)
