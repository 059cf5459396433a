"""Numbers written in words, written in digits (pure; issue 25, eleventh pass).

heldout8, the set written blind to the rules, had seven same-answer pairs whose two sides wrote one
number two ways, and none hit: "How much is the iPhone fifteen?" found no product (the policy lists
``iphone 15``), "Can I check two bags" kept ``two`` where "Can I check 2 bags" kept ``2``, "经济舱能带两件行李吗"
kept ``两`` where "…2件…" kept ``2``. So a number written in words becomes its digits before anything
matches slots, units or numbers; a policy's own terms and aliases go through the same step, so ``一个月``
in a policy is ``1个月`` and still matches what the customer wrote either way.

* **English**: ``zero`` … ``nineteen``, ``twenty`` … ``ninety`` and a tens word joined to a unit word by
  a space or a hyphen (``twenty one``, ``twenty-one`` → ``21``), whole words only. Exact numbers only:
  ``a couple``, ``a pair``, ``single``, ``double``, ``dozen`` keep their words (``single room`` is a room
  type, a couple is not always two). A run of number words joined by spaces or hyphens is rewritten only
  when it is one of those numbers: "one hundred", "two dozen", "one point five", "one two three" keep
  their words, as does a number word after ``and``/``point`` ("five hundred and twenty"); "twenty, one"
  (two numbers: the comma is still there when this runs) is ``20, 1``, never ``21``; a run whose last
  word goes on with a hyphen ends before it ("twenty one-way tickets" is ``20 1-way``, never ``21``).
* **Chinese**: ``一`` … ``九``, ``两`` and ``俩`` (2), ``十``, ``十一`` … ``十九``, ``二十`` … ``九十九``,
  only as a count: right before a measure word or a unit (``两件``, ``三晚``, ``一个月``, ``五公斤``,
  ``两个小时``), never after another number character (``一百五十个`` keeps its words: it is 150, not
  ``一百`` and ``50``; ``两三件``, "two or three", keeps both), and never ``一下``/``一起``/``一样``/``一点``
  (no measure word follows: they name no quantity). After an ASCII letter or digit the digits are set
  off by a space: an identifier's last digit and the count would otherwise read as one number
  (``SO20231104两件`` is ``so20231104 2件``, never ``so202311042件``), and ``plan一个月`` is ``plan 1个月``,
  where the policy's ``一个月`` (``1个月``) starts at a word edge as the matcher needs.

Two different numbers never become one: each number phrase becomes the digits of its own value, and
the words around it stay. ``normalize`` stays idempotent: the output holds no number word this step
reads, and a digit next to another number character is exactly what the Chinese rule does not touch
(property-tested in tests/unit/test_semantic_recall11.py). Measured with ``python -m
bench.semantic_independent --split tune+heldout+dev+heldout2+heldout3+tune4+heldout4+heldout5+heldout6+heldout7+heldout8
--modes phrases fingerprint``: docs/benchmarks.md, eleventh pass.
"""

from __future__ import annotations

import re

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_MAGNITUDE = ("hundred", "hundreds", "thousand", "thousands", "million", "millions", "billion", "billions",
              "dozen", "dozens", "point")  # fmt: skip
_WORD = "|".join(sorted((*_UNITS, *_TENS, *_MAGNITUDE), key=len, reverse=True))
# A run of number words joined by spaces or hyphens; only a run that is one number is rewritten.
# Not after ``and``/``point`` ("five hundred and twenty", "one point five" are one number each). A run
# whose last word goes on with a hyphen ends before that word ("twenty one-way tickets" is 20 tickets,
# one way each: ``20 1-way``).
_EN_RUN = re.compile(
    rf"(?<![a-z0-9_])(?<!and )(?<!point )(?:{_WORD})(?:[- ](?:{_WORD}))*(?![a-z0-9_])(?P<hyphen>(?=-[a-z]))?"
)
_SPLIT = re.compile(r"([- ])")


def _value(words: list[str]) -> str | None:
    """The digits of a run that is one number, else None."""
    if len(words) == 1 and words[0] in _UNITS:
        return str(_UNITS[words[0]])
    if len(words) == 1 and words[0] in _TENS:
        return str(_TENS[words[0]])
    if len(words) == 2 and words[0] in _TENS and words[1] in _UNITS and 0 < _UNITS[words[1]] < 10:
        return str(_TENS[words[0]] + _UNITS[words[1]])
    return None  # a magnitude, a decimal, or two numbers side by side: left as written


def _en(m: re.Match[str]) -> str:
    parts = _SPLIT.split(m.group())  # words and their separators
    words = parts[::2]
    if m.group("hyphen") is not None and len(words) > 1:
        head, last = "".join(parts[:-2]), words[-1]
        return f"{_value(words[:-1]) or head}{parts[-2]}{_value([last]) or last}"
    return _value(words) or m.group()


_ZH_DIGIT = {
    "一": 1,
    "二": 2,
    "两": 2,
    "俩": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
# Measure words and units a count stands before (longest first where one is a prefix of another). Not
# ``点`` (一点 is "a little"), ``下`` (一下), ``起``, ``样``, ``般``, ``些``, ``直``: no count.
_ZH_MEASURES = (
    "小时|分钟|公斤|千克|公里|千米|英里|美元|英镑|欧元|星期|礼拜|"
    "个|件|位|张|台|部|间|晚|天|夜|次|份|只|本|条|瓶|杯|碗|盒|袋|箱|双|对|套|辆|趟|周|年|岁|月|人|口|层|家|种|"
    "遍|回|倍|斤|克|米|元|块|秒|分|晚上|号|日|款|笔|张|单|盘|串|根|颗|片|包|罐|升|磅|寸|英寸|厘米|毫升|站"
)
_ZH_NUMERAL = "零一二两俩三四五六七八九十百千万亿"
_ZH = re.compile(
    rf"(?<![{_ZH_NUMERAL}])"
    r"(?:(?P<t>[二三四五六七八九])?十(?P<u>[一二三四五六七八九])?|(?P<d>[一二两俩三四五六七八九]))"
    rf"(?=(?:{_ZH_MEASURES}))"
)


def _zh(m: re.Match[str]) -> str:
    if m.group("d") is not None:
        value = _ZH_DIGIT[m.group("d")]
    else:
        value = (_ZH_DIGIT[m.group("t")] if m.group("t") else 1) * 10 + (
            _ZH_DIGIT[m.group("u")] if m.group("u") else 0
        )
    # after an ASCII letter or digit, a space: the identifier's last digit and the count stay two words
    # (``so20231104两件`` is ``so20231104 2件``), and a policy's ``1个月`` still starts at a word edge
    return f" {value}" if m.start() > 0 and _ASCII_WORD.match(m.string[m.start() - 1]) else str(value)


_ASCII_WORD = re.compile(r"[a-z0-9_]")


def english_numbers(text: str) -> str:
    """English number words (folded, lower-case text, punctuation still in place) as digits."""
    return _EN_RUN.sub(_en, text) if _HAS_EN.search(text) else text


def chinese_numbers(text: str) -> str:
    """Chinese counts (text with its CJK gaps joined) as digits."""
    return _ZH.sub(_zh, text)


_HAS_EN = re.compile("|".join((*_UNITS, *_TENS)))
