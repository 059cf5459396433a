"""A built-in lexicon of customer-service paraphrases, and what it adds to one policy (pure; issue 25,
tenth pass).

On heldout7, the set written blind to the rules, synonyms were the largest class of lost recall (22 of
60 synonym pairs hit, 38 of the 82 misses): a customer writes ``security deposit`` or ``押金`` where the
policy lists ``deposit``, ``how old do I need to be`` where it lists ``how old do i have to be``,
``退房`` after ``最晚几点`` where it lists ``几点退房``. A policy's synonym lists are where recall lives,
and an operator cannot list every wording. So the route extends them from this lexicon: groups of
wordings that ask the same thing in any customer-service domain, English and Chinese, written from
general knowledge of the domains' vocabulary (shop, airline, mobile plan, bank card, hotel, car rental,
food and takeaway orders),
by a developer who had read heldout7's misses (a development set since): it holds some wordings those
misses use and many they do not, and heldout8, written by someone else, is what measures it unseen. It is
applied before intent matching like the policy's own synonyms.

A group is used by a policy only where the policy already says what it means: ``expand`` adds a
group's wordings to the policy's synonym group that lists one of them (the *anchor*), and only when all
of these hold:

* exactly one of the policy's synonym groups lists a member (the anchor). Where two do, the policy tells
  apart what the lexicon would merge (``parking`` and ``parking fee`` are one group in the hotel example,
  but a policy with a ``parking_fee`` and a ``parking_availability`` intent keeps them apart): the group
  is not used at all;
* the wording is no term, filler, intent wording or slot or constraint alias of the policy, nor a form
  the inflection rule derives (``cache.semantic.inflect``): the policy's own mapping wins;
* the wording holds no slot or constraint value of the policy (a lexicon term never swallows an entity:
  ``cancel my booking`` would hide nothing, ``km limit`` would hide the unit), no negation and no
  number (``vocab``): those always stay in the fingerprint;
* the wording holds no intent's own wording (it would take that wording's place). It may hold a term of
  another synonym group of the policy: the wording is longer, so it names something more specific, and
  the longest term wins as it does among the policy's own terms (issue 25, eleventh pass: the telecom
  example's ``how much data`` inside ``how much data do i have left`` left the data balance question
  to the allowance term, "How much data do I have left on the Plus plan?" had no key; measured: +2 on
  heldout7, no other split changed, no false hit).

Measured (``python -m bench.semantic_independent --split tune+…+heldout7 --modes phrases fingerprint
--show``, docs/benchmarks.md, tenth pass): heldout7 100 → 109 of 182 same-answer pairs, heldout2 +1,
heldout6 +1, no false hit on any split; ``what does it cost``/``how much does it cost`` were taken out
(they took the ``cost`` of ``cost to call`` on ``dev``).

Units are a second table (``UNITS``): a constraint or slot value whose aliases hold one unit wording
gets the others (``kilos``/``公斤``/``千克`` for ``kg``), by the same rules with the value as the anchor.
Units that measure different amounts are never one group: ``斤`` (500 g) is not ``公斤``, ``pound``
is also a currency and is left out, ``min`` may be ``minimum``.

Each group is one meaning, never a broader word for a narrower one: ``dog`` and ``cat`` are not
``pets`` (a hotel may take one and not the other), ``reset`` is not ``change`` (a forgotten PIN is not a
known one), ``late check out`` is not ``check out time``, ``refund`` is not ``return`` (退款 is money,
退货 goods), ``closing`` is not ``opening``. Each member belongs to one group only, and no member
contains ``_`` (a synonym term never does: normalisation stays idempotent), both checked by tests
(tests/unit/test_semantic_recall10.py), beside near misses that must keep their own keys (``cat``,
``reset my PIN``, ``late check out``, ``延迟退房``, ``退款``, ``斤``). ``prefix-gateway semantic explain``
prints which synonym fired and whether it came from the policy, the inflection rule or this lexicon.

Two more tables here are read by other modules: ``KINDS`` (a slot's kind word next to its value,
``cache.semantic.extractors.kinds``) and ``PRICE``/``AMOUNTS`` (``yields``: a price's "how much is" next
to a named amount asks that amount).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from cache.semantic.normalize import base_normalize, has_cjk
from cache.semantic.terms import TermMatcher
from cache.semantic.vocab import NEGATIONS, NOT_NUMBERS, NUMBER_WORDS, taken_terms
from config.semantic import SemanticConfig

PRICE: tuple[str, ...] = (
    "price",
    "cost",
    "costs",
    "how much is",
    "price tag",
    "多少钱",
    "价格",
    "价钱",
    "售价",
)
# Named amounts of money: a question that names one and asks "how much is" asks that amount (``yields``).
AMOUNTS: tuple[tuple[str, ...], ...] = (
    ("deposit", "security deposit", "damage deposit", "押金", "保证金"),
    ("annual fee", "yearly fee", "annual charge", "yearly charge", "年费", "年费是多少"),
    ("change fee", "rebooking fee", "change charge", "fee to change", "改签费", "改签费用", "改签手续费"),
    ("cash advance fee", "cash advance charge", "fee for a cash advance", "取现手续费", "预借现金手续费", "取现费",
     "取现费用"),
    ("foreign transaction fee", "foreign transaction charge", "境外交易手续费", "境外消费手续费", "境外手续费",
     "外币交易手续费"),
    ("atm withdrawal fee abroad", "atm fee abroad", "overseas atm fee", "atm fee overseas", "境外取现手续费",
     "境外atm取现手续费"),
    ("replacement card fee", "replacement fee", "fee for a replacement card", "cost of a replacement card",
     "补卡费", "补卡费用", "补卡手续费", "补办卡片费用"),
    ("interest rate", "rate of interest", "apr", "利率", "年利率"),
    ("shipping fee", "shipping cost", "delivery fee", "delivery charge", "postage", "运费", "邮费", "配送费"),
    ("parking fee", "parking charge", "parking cost", "parking", "car park", "停车费", "停车收费", "停车费用", "停车"),
    ("roaming charges", "roaming fees", "roaming rates", "roaming costs", "roaming", "漫游费", "漫游资费", "漫游收费"),
    ("call rate", "call rates", "calling rates", "call charges", "cost of calls", "通话资费", "通话费", "话费标准"),
    ("minimum order", "minimum order amount", "minimum order value", "minimum spend", "起送价", "起送金额", "最低起送价"),
    ("service fee", "service charge", "服务费"),
)  # fmt: skip
LEXICON: tuple[tuple[str, ...], ...] = (
    # money: what something costs
    PRICE,
    *AMOUNTS,
    # cancelling, refunds, returns
    ("cancellation policy", "cancellation rules", "cancellation terms", "cancelation policy", "取消政策", "取消规定",
     "取消条款"),
    ("cancel my booking", "cancel my reservation", "cancel a booking", "cancel a reservation", "cancel the booking",
     "cancel the reservation", "call off my booking", "取消预订", "取消预定", "退订"),
    ("free cancellation", "cancel for free", "cancel free of charge", "cancel without charge", "免费取消"),
    ("refund policy", "refund rules", "refund terms", "退票政策", "退票规定", "退票规则"),
    ("refund", "money back", "get my money back", "退款", "退钱"),
    ("return policy", "returns policy", "return window", "return period", "returns window", "退货政策", "退货期限"),
    ("warranty", "guarantee", "warranty period", "保修", "质保", "保修期", "质保期"),
    # bookings and orders
    ("booking status", "reservation status", "status of my booking", "status of my reservation", "预订状态",
     "预定状态"),
    ("order status", "status of my order", "track my order", "where is my order", "物流状态"),
    # food and takeaway orders
    ("delivery time", "how long does delivery take", "how long is delivery", "delivery eta", "配送时间", "送达时间",
     "多久送到", "多久能送到"),
    ("delivery area", "delivery zone", "delivery radius", "配送范围", "送餐范围"),
    ("cancel my order", "cancel the order", "cancel an order", "取消订单"),
    ("promo code", "discount code", "coupon code", "voucher code", "优惠码", "折扣码"),
    ("payment methods", "payment options", "ways to pay", "支付方式", "付款方式"),
    ("allergen information", "allergy information", "allergens", "过敏原", "过敏原信息"),
    ("missing item", "item missing", "missing items", "items missing", "少送了", "漏送"),
    ("tip", "tipping", "小费"),
    ("flight status", "status of my flight", "航班状态", "航班动态"),
    # stays
    ("入住时间", "几点入住", "几点可以入住", "什么时候可以入住", "几点可以办理入住", "办理入住时间", "几点能入住"),
    ("check out time", "checkout time", "what time is check out", "what time is checkout", "latest check out time",
     "退房时间", "几点退房", "最晚几点退房", "最晚什么时候退房", "几点前退房"),
    ("breakfast included", "include breakfast", "includes breakfast", "with breakfast", "含早餐", "包早餐", "有早餐",
     "带早餐", "提供早餐", "含早"),
    ("pet policy", "pets allowed", "pet friendly", "宠物政策", "可以带宠物", "能带宠物"),
    ("airport shuttle", "airport shuttle bus", "airport transfer", "airport pickup", "机场接送", "接机服务", "机场班车"),
    # rental cars
    ("opening hours", "business hours", "opening times", "hours of operation", "open hours", "营业时间", "开门时间",
     "几点开门", "几点营业"),
    ("minimum age", "age limit", "age requirement", "minimum driver age", "minimum driving age",
     "how old do i have to be", "how old do i need to be", "how old must i be", "最低年龄", "年龄要求", "年龄限制",
     "要满多少岁", "满多少岁"),
    ("additional driver", "extra driver", "second driver", "add a driver", "add another driver", "add a second driver",
     "额外驾驶人", "增加驾驶人", "第二驾驶人", "附加驾驶人", "额外司机"),
    ("child seat", "child car seat", "kids seat", "儿童座椅", "儿童安全座椅"),
    ("fuel policy", "refuelling policy", "refueling policy", "fuel rules", "燃油政策", "油费政策", "加油政策"),
    ("insurance", "insurance cover", "insurance coverage", "保险", "保险范围"),
    ("mileage limit", "mileage cap", "mileage allowance", "distance limit", "里程限制", "里程上限"),
    # travel
    ("baggage allowance", "luggage allowance", "bag allowance", "行李额", "行李限额", "托运行李额"),
    ("carry on", "hand luggage", "cabin bag", "手提行李", "随身行李"),
    ("值机时间", "什么时候可以值机", "几点可以值机", "什么时候开始值机", "值机什么时候开始"),
    # mobile plans
    ("data balance", "remaining data", "data left", "data remaining", "how much data do i have left",
     "how much data is left", "剩余流量", "还剩多少流量", "剩多少流量", "流量还剩多少"),
    ("top up", "recharge", "add credit", "充值", "充话费", "交话费"),
    ("number porting", "port my number", "keep my number", "transfer my number", "携号转网"),
    ("hotspot", "tethering", "personal hotspot", "热点", "个人热点", "开热点"),
    ("esim activation", "activate esim", "activate my esim", "activate an esim", "激活esim", "esim激活", "开通esim"),
    # cards
    ("lost card", "lost my card", "report a lost card", "卡丢了", "丢卡", "挂失", "卡片丢失"),
    ("change my pin", "change pin", "pin change", "修改密码", "改密码", "更改密码"),
    ("increase my credit limit", "raise my credit limit", "credit limit increase", "提高信用额度", "提额", "提高额度"),
    ("contactless limit", "contactless payment limit", "tap to pay limit", "免密支付限额", "闪付限额"),
    ("payment due date", "due date", "还款日", "最后还款日", "还款日期"),
    ("minimum payment", "minimum repayment", "minimum amount due", "最低还款", "最低还款额"),
    # products
    ("battery life", "battery runtime", "续航", "续航时间"),
    ("weight", "how heavy", "重量", "多重"),
    ("screen size", "display size", "屏幕尺寸", "屏幕大小"),
    ("waterproof", "water resistant", "water resistance", "防水"),
)  # fmt: skip

UNITS: tuple[tuple[str, ...], ...] = (
    ("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms", "公斤", "千克"),
    ("lb", "lbs", "磅"),
    ("km", "kms", "kilometre", "kilometres", "kilometer", "kilometers", "公里", "千米"),
    ("mile", "miles", "英里"),
    ("gb", "gig", "gigs", "gigabyte", "gigabytes"),
    ("inch", "inches", "英寸"),
    ("cm", "centimetre", "centimetres", "centimeter", "centimeters", "厘米"),
    ("gram", "grams", "克"),
    ("watt", "watts", "瓦"),
    ("mah", "毫安", "毫安时"),
)  # fmt: skip


# Kind words: what a customer calls the kind of thing a slot's value is ("Premium *car*", "Heathrow
# *branch*", "深圳*门店*"), each group chosen by the slot name or its first word (``car_class``: ``car``;
# ``booking_no``: ``booking``). Next to a value they name nothing new (``cache.semantic.extractors.kinds``).
# Chinese kind words have two characters or more (one character is too often the start of another word).
KINDS: tuple[tuple[str, ...], ...] = (
    ("car", "cars", "vehicle", "车辆"),
    ("branch", "office", "location", "store", "门店", "网点", "分店", "营业点"),
    ("room", "rooms", "房间"),
    ("plan", "套餐"),
    ("card", "卡片"),
    ("cabin", "class", "舱位"),
    ("flight", "航班"),
    ("booking", "reservation", "预订", "预定"),
    ("order", "订单"),  # an order number's kind word (eleventh pass: "订单FD…" in the food delivery example)
    ("city", "城市"),
    ("country", "国家"),
)  # fmt: skip


def yields(
    intents: Mapping[str, Iterable[str]], synonyms: Mapping[str, Iterable[str]]
) -> dict[str, frozenset[str]]:
    """intent -> the intents it yields to (``fingerprint``): an intent whose terms hold the policy's price
    canonical (the synonym group holding a ``PRICE`` wording, "how much is", "多少钱") yields to every
    other intent whose terms hold the canonical of a named amount (``AMOUNTS``: a deposit, a fee, a
    rate). "How much is the deposit for a van?" and "押金多少钱" ask the deposit, where the price's
    "how much is" made the question two intents and no key. ``intents``: intent -> its terms;
    ``synonyms``: canonical -> its terms (the policy's own, and the lexicon's)."""
    of = {base_normalize(t): c for c, ts in synonyms.items() for t in ts}

    def anchors(groups: Iterable[tuple[str, ...]]) -> set[str]:
        return {of[m] for g in groups for m in (base_normalize(x) for x in g) if m in of}

    price, amounts = anchors([PRICE]), anchors(AMOUNTS) - anchors([PRICE])
    if len(price) != 1:
        return {}
    asking = {i for i, ts in intents.items() if price & set(ts)}
    named = frozenset(i for i, ts in intents.items() if amounts & set(ts)) - asking
    return {i: named for i in asking} if named else {}


def kind_words(cfg: SemanticConfig) -> dict[str, tuple[str, ...]]:
    """slot -> its kind words (normalised): the ``KINDS`` groups holding the slot name or its first word, less
    any word the policy uses itself (a term, filler, intent wording or alias)."""
    used = {base_normalize(t) for t in taken_terms(cfg)}
    used |= {base_normalize(t) for g in cfg.synonyms for t in g.terms}
    names = {s for e in cfg.slots for s in e.slots()}
    out = {}
    for slot in sorted(names):
        parts = {slot, slot.split("_")[0]}
        words = [base_normalize(w) for g in KINDS if parts & set(g) for w in g]
        if kept := tuple(dict.fromkeys(w for w in words if w not in used)):
            out[slot] = kept
    return out


@dataclass(frozen=True, slots=True)
class Expansion:
    """What the lexicon adds to one policy: canonical -> new terms, and (slot, value) -> new aliases, all
    normalised; ``unused``: the groups the policy tells apart (members in two of its groups or values)."""

    synonyms: dict[str, tuple[str, ...]]
    aliases: dict[tuple[str, str], tuple[str, ...]]
    unused: tuple[tuple[str, ...], ...]

    def terms(self) -> list[str]:
        """Every added wording (never a typo target, never corrected: ``vocab.known_words``)."""
        return [t for ts in (*self.synonyms.values(), *self.aliases.values()) for t in ts]


_Owner = TypeVar("_Owner", str, tuple[str, str])  # a canonical, or a (slot, value)


def _holds_a_number_or_negation(term: str) -> bool:
    if any(c.isdigit() for c in term):
        return True
    if any(w in NEGATIONS or w in NUMBER_WORDS for w in term.split()):
        return True
    if has_cjk(term):
        rest = term
        for w in NOT_NUMBERS:
            rest = rest.replace(w, " ")
        return any(n in rest for n in (*NEGATIONS, *NUMBER_WORDS) if has_cjk(n))
    return False


def _attach(
    groups: Iterable[tuple[str, ...]],
    anchor_of: Mapping[str, _Owner],
    blocked: set[str],
    holds_entity: Callable[[str], bool],
    numbers: bool = True,
    inside: tuple[TermMatcher, Mapping[str, str]] | None = None,
) -> tuple[dict[_Owner, list[str]], list[tuple[str, ...]]]:
    """owner -> new normalised members, for each group anchored in exactly one owner; and the groups two
    owners share (unused)."""
    added: dict[_Owner, list[str]] = {}
    unused = []
    for group in groups:
        members = [base_normalize(m) for m in group]
        owners = {anchor_of[m] for m in members if m in anchor_of}
        if len(owners) > 1:
            unused.append(group)
        if len(owners) != 1:
            continue
        owner = owners.pop()
        for m in members:
            if m in anchor_of or m in blocked or holds_entity(m):
                continue
            if numbers and _holds_a_number_or_negation(m):
                continue
            # an intent's own wording inside it would lose its place; another group's term inside a longer,
            # more specific wording is what the wording means as a whole (``how much data`` in ``how much data
            # do i have left``: the longest term wins, as for the policy's own terms)
            if inside is not None and any(inside[1][t].startswith("intent ") for t in inside[0].found(m)):
                continue
            if m not in added.setdefault(owner, []):
                added[owner].append(m)
    return added, unused


def expand(cfg: SemanticConfig, derived: Iterable[str], holds_entity: Callable[[str], bool]) -> Expansion:
    """The lexicon's additions to ``cfg`` (rules in the module docstring). ``derived``: the terms the
    inflection rule adds (normalised); ``holds_entity(term)``: whether a slot or constraint extractor of
    the route finds a value in the (normalised) term."""
    synonym_of = {base_normalize(t): g.canonical for g in cfg.synonyms for t in g.terms}
    blocked = {base_normalize(t) for t in taken_terms(cfg)} | set(derived) | set(synonym_of)
    # a wording that holds another group's term or an intent's own wording would take that term's place
    owner_of = synonym_of | {
        base_normalize(t): f"intent {i.name}"
        for i in cfg.intents
        for t in i.terms
        if t not in synonym_of.values()
    }
    inside = TermMatcher(owner_of)
    words, unused = _attach(LEXICON, synonym_of, blocked, holds_entity, inside=(inside, owner_of))
    owners_of: dict[str, set[tuple[str, str]]] = {}
    for extractors in (cfg.slots, cfg.constraints):
        for e in extractors:
            for value, aliases in e.values.items():
                for a in (value, *aliases):
                    owners_of.setdefault(base_normalize(a), set()).add((str(e.slot), value))
    value_of = {a: next(iter(o)) for a, o in owners_of.items() if len(o) == 1}
    # a unit wording is never added where the policy uses it otherwise (a term, filler, intent wording)
    unit_blocked = (
        {base_normalize(t) for t in (*taken_terms(cfg), *synonym_of)} | set(derived) | set(owners_of)
    )
    # units are no numbers (千克, 千米 hold 千)
    units, unused_units = _attach(UNITS, value_of, unit_blocked, lambda _t: False, numbers=False)
    return Expansion(
        {c: tuple(ts) for c, ts in words.items() if ts},
        {owner: tuple(ts) for owner, ts in units.items() if ts},
        (*unused, *unused_units),
    )
