"""Built-in word lists, and the check that keeps a policy from ignoring a word that changes the answer (pure).

A filler is ignored when a fingerprint is built: a question that differs from another only by a filler
gets the other's key and its answer. On the independent set of issue 25 the example policy's fillers
``battery`` and ``charge`` made "How much is the Pixel 8 battery?" share the price of the Pixel 8 and
"How much does it cost to charge the iPhone 15?" the phone's price. So a filler is *dangerous*, and
never ignored (``SemanticRoute`` drops it from its filler list; ``check-config`` names it), when it is

* a word of the policy's own vocabulary (a synonym term, an intent term, a slot or constraint alias)
  that is not a function word (``FUNCTION_WORDS``: articles, pronouns, auxiliaries, question words,
  prepositions, politeness; for Chinese, particles and question words), or for a Chinese filler, a
  part of such a term (Chinese has no spaces: ``电池`` is inside ``电池容量``);
* a built-in content word (``CONTENT_WORDS``: parts, accessories, services, money, conditions, variants,
  places), a negation (``NEGATIONS``) or a number word (``NUMBER_WORDS``).

Greetings and politeness (``GREETINGS``: "Hi there", "sorry to bother you", "could you tell me",
"I was wondering"; ``ASKING_WHETHER``: those followed by "whether"/"if"; ``ZH_POLITENESS``: "麻烦问下",
"我想问一下", "帮我查一下") the auxiliaries of tense and mood (``AUXILIARIES``: ``will``, ``could``, ``be``) and hesitations
(``HESITATIONS``: ``um``, ``erm``; issue 25, sixth pass) are fillers of every route: they never change
an answer.

``SIMILARITY_SAFE`` is what the guarded embedding mode lets two questions differ by when no rule explains
those words (``guards.veto``, rule ``compatible``): articles, pronouns, auxiliaries, politeness and
asking verbs, and the question words that only ask for the amount the intent already names (``what``,
``how``, ``much``, ``many``: "How much is the minimum repayment?" is "What is the minimum payment?").
Not the question words that change what is asked (``how long``, ``when``, ``where``, ``why``),
prepositions (``from`` is not ``to``), quantities or anything in ``CONTENT_WORDS``: a word that can
change the answer never differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cache.semantic.normalize import base_normalize, has_cjk
from config.semantic import SemanticConfig


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


FUNCTION_WORDS = _set(
    """a an the this that these those it its i me my mine you your we our us they their he she his her
    is are was were be been being am do does did doing have has had having can could would should shall
    may might must what whats which who whom whose where when why how hows wheres whens
    much many long big large heavy fast far often old
    of for in on at to from by with about into onto as per
    and or if so than then there here please tell know want like get give show let
    s t d ll re ve"""
) | _set(
    """的 了 吗 呢 啊 呀 吧 嘛 是 有 能 会 可 可以 用 在 下 请 麻烦 请问 多 多少 多大 多久 多长 多重 几 什么 什么时候 怎么
    怎样 哪 哪里 哪儿 一下 我 我的 你 你们 您 这 这个 这款 那 那个 一 个 台 部 款 要 想 告诉 知道 帮 查 看"""
)
GREETINGS = (
    "hi", "hello", "hey", "hiya", "good morning", "good afternoon", "good evening", "quick question",
    "a quick question", "question", "thanks", "thank you", "thx", "cheers", "please",
    "hi there", "hello there", "hey there", "thanks in advance", "thank you in advance", "sorry",
    "sorry to bother you", "excuse me", "just wondering", "i was wondering", "i am wondering",
    "im wondering", "i wonder", "wondering", "i think", "tell me", "could you tell me", "can you tell me",
    "would you tell me", "could you please tell me", "can you please tell me", "i would like to know",
    "id like to know", "i want to know", "i need to know", "do you know", "may i ask", "can i ask",
    "i have a question", "i would like to", "i want to", "tell me whether", "tell me if",
    "你好", "您好", "嗨", "哈喽", "谢谢", "多谢", "麻烦了", "问一下", "请问一下", "想问一下", "问下", "打扰一下",
    "麻烦问一下", "想咨询一下", "咨询一下",
    # issue 25, sixth pass: more of the same class, written from how people open and close a chat
    "quick one", "one quick question", "one more question", "another question", "a question",
    "hi again", "hello again", "hey again", "good day", "greetings", "pls", "plz", "thanks a lot",
    "many thanks", "thank you so much", "thanks so much", "much appreciated", "appreciate it",
    "i appreciate it", "by the way", "btw", "if possible", "if you can", "if you could",
    "could you please", "can you please", "would you please", "could you", "can you", "would you",
    "在吗", "你好在吗", "您好在吗", "谢谢啦", "谢谢了", "辛苦了", "麻烦你了", "麻烦您了", "打扰了",
    # issue 25, eighth pass (held-out 5 as a development set: "Would you mind telling me the Pixel 8 screen
    # size?", "Please let me know where my order … is", "Please explain how to activate an eSIM", "Just
    # curious, how big is …"): asking someone to tell, explain or let one know, and saying why one asks
    "would you mind telling me", "would you mind", "do you mind telling me", "mind telling me",
    "let me know", "please let me know", "could you let me know", "can you let me know",
    "would you let me know", "explain", "please explain", "can you explain", "could you explain",
    "just curious", "curious", "im curious", "i am curious", "out of curiosity",
    # issue 25, ninth pass (held-out 6 as a development set: "Do you have an airport shuttle in Shanghai?",
    # "Is my booking … confirmed? It's urgent"): asking whether a service is offered, which the service's
    # own term answers ("do you have" is not "have": "I have lost my card" keeps it), and saying it is urgent
    "do you have", "do you offer", "do you provide", "it is urgent", "this is urgent", "its urgent",
)  # fmt: skip
# An asking phrase followed by "whether"/"if" ("could you tell me whether flight MU5101 is on time"): the
# phrase alone left ``whether`` unexplained (round 3's development split). Only after these phrases.
_ASKING = ("tell me", "could you tell me", "can you tell me", "would you tell me", "could you please tell me",
           "can you please tell me", "please tell me", "do you know", "i was wondering", "i am wondering",
           "im wondering", "just wondering", "wondering", "i wonder", "i would like to know", "i want to know")  # fmt: skip
ASKING_WHETHER = tuple(f"{p} {w}" for p in _ASKING for w in ("whether", "if"))
# Chinese politeness and asking phrases, built in like ``GREETINGS`` (issue 25, fourth pass): "麻烦问下",
# "我想问一下", "帮我查一下" ask nothing of their own. Chinese fillers match inside words (no spaces), so
# only phrases and the sentence-final particles that are part of no word a customer types around them
# (``啊 呀 呢 哦 嘛 啦``; not ``吧``: 酒吧, nor ``哈``: 哈尔滨).
ZH_POLITENESS = (
    "请问", "请问下", "麻烦问下", "麻烦问一下", "麻烦您", "麻烦你", "我想问", "我想问下", "我想问一下", "想问",
    "想问下", "想请问", "我想请问", "请教一下", "请教下", "我想咨询一下", "帮我查一下", "帮我查下", "帮忙查一下",
    "帮我看一下", "帮我看看", "请告诉我", "告诉我", "能告诉我", "可以告诉我", "你好请问", "您好请问", "劳驾",
    "谢谢你", "谢谢您", "啊", "呀", "呢", "哦", "嘛", "啦",
    # issue 25, seventh pass (held-out 3 as a development set: "想提高信用额度怎么办"): "I want to", which
    # ``GREETINGS`` already ignores in English ("i want to", "i would like to"); not ``要`` alone (``要多少钱``
    # asks a price, ``需要``, ``重要``)
    "我想", "想", "我想要", "想要", "我要",
    # issue 25, eleventh pass: "please" before an asking verb, and "thanks" (heldout8: "麻烦帮我查一下订单…，谢谢");
    # not ``麻烦`` alone ("有麻烦", trouble) nor ``查一下`` alone ("怎么查一下余额" asks how to check it)
    "麻烦帮我查一下", "麻烦帮我查下", "麻烦帮忙查一下", "麻烦查一下", "麻烦帮我看一下", "谢谢", "多谢",
)  # fmt: skip
# Hesitations ("So, um, how heavy is the Mate 60?"; issue 25, sixth pass): sounds, not words, anywhere.
HESITATIONS = ("um", "umm", "uh", "uhh", "uhm", "erm", "hmm", "hmmm")
# Tense and mood of the question's verb: "Will flight BA38 be delayed?" asks what "Is flight BA38
# delayed?" asks, "How long will the battery last" what "How long does the battery last" does. Not the
# modals that change what is asked (can/must/should: permission or obligation) nor any negated form
# (``wont``, ``isnt`` are ``NEGATIONS``). Aspect too (issue 25, eighth pass, held-out 5 as a development
# set): "Has order … shipped yet?" asks what "Has order … shipped?" does, and "already" the same; "not
# yet" keeps its ``not`` (a negation is never ignored).
AUXILIARIES = (
    "will", "would", "could", "be", "been", "does", "do", "did", "is", "are", "am", "was", "were", "yet", "already",
)  # fmt: skip
# Everyday words one edit from a policy word that are words, not typos (``cache.semantic.typos``).
COMMON_WORDS = _set(
    """dates later plane planes glass class classes phone phones price prices order orders account
    balance number numbers statement online ticket tickets travel abroad overseas unlock unfreeze
    deactivate close closed opens opened month months monthly yearly daily weekly minute minutes
    second seconds pound pounds ounce ounces liter liters meter meters money credit debit bills where
    there their these those other which while about after before under again still right wrong today
    early gates seats meals student students infant infants child children adult senior plans change
    changes charge charged charges flight flights delay delays cancel cancelled"""
)
NEGATIONS = _set(
    """not no never none without non dont doesnt didnt isnt arent wasnt werent cant cannot wont
    shouldnt neither nor nothing 不 没 没有 无 无法 不能 不可以 别 非 未 勿"""
)
NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "twenty": "20", "thirty": "30", "hundred": "100", "thousand": "1000", "dozen": "12",
    "single": "1", "double": "2", "triple": "3", "pair": "2", "couple": "2",
    "零": "0", "一": "1", "两": "2", "二": "2", "三": "3", "四": "4", "五": "5", "六": "6", "七": "7",
    "八": "8", "九": "9", "十": "10", "百": "100", "千": "1000", "万": "10000",
}  # fmt: skip
# Chinese words written with a number character that name no quantity (查一下 "have a look").
NOT_NUMBERS = ("一下", "一般", "一些", "一直", "一起", "一样")
CONTENT_WORDS = _set(
    """battery batteries charge charger charging cable case cover strap screen display camera lens
    box accessory accessories part parts keyboard headphones earbuds adapter
    price prices cost costs fee fees fare tax shipping delivery postage repair repairs replacement
    warranty guarantee insurance refund refunds refundable return returns exchange cancel cancelled
    cancellation subscription plan rent rental trade deposit discount coupon
    new used refurbished open opened damaged broken old second
    pro max ultra mini plus lite air se fold flip
    size weight color colour storage memory capacity resolution speed power life time wattage
    first last next previous international domestic
    kg g lb oz inch cm mm hours days weeks months years"""
) | _set(
    """电池 充电 充电器 数据线 壳 手机壳 保护壳 屏幕 摄像头 镜头 盒子 配件 耳机 价格 钱 费 运费 维修 保修 退货
    换货 退款 退票 改签 取消 订阅 押金 折扣 优惠 新 二手 翻新 拆封 损坏 尺寸 重量 颜色 存储 内存 容量 分辨率
    速度 功率 寿命 时间 国际 国内 斤 克 公斤 小时 天 年"""
)


SIMILARITY_SAFE = _set(
    """a an the this that these those it its i me my you your we our us they their
    is are was were be been am do does did have has had can could would should may might
    what whats how much many include includes included
    please kindly tell know want like wondering wonder get give show let see find check need
    just also exactly actually really any some ok okay thanks thank hi hello hey quick question
    s t d ll re ve"""
)


@dataclass(frozen=True, slots=True)
class DangerousFiller:
    index: int  # in cfg.fillers
    filler: str
    why: str


def _vocabulary(cfg: SemanticConfig) -> list[tuple[str, str]]:
    """(term, where it comes from) for every term of the policy's own vocabularies."""
    out = [(t, f"synonym {g.canonical!r}") for g in cfg.synonyms for t in g.terms]
    out += [(t, f"intent {i.name!r}") for i in cfg.intents for t in i.terms]
    for what, extractors in (("slot", cfg.slots), ("constraint", cfg.constraints)):
        for e in extractors:
            for value, aliases in e.values.items():
                out += [(a, f"{what} {e.slot}={value!r}") for a in (value, *aliases)]
    return out


def dangerous_fillers(
    cfg: SemanticConfig, normalize: Callable[[str], str] = base_normalize
) -> list[DangerousFiller]:
    """The fillers of ``cfg`` that can change an answer, with why (see the module docstring)."""
    vocab = [(base_normalize(t), where) for t, where in _vocabulary(cfg)]
    out = []
    for i, raw in enumerate(cfg.fillers):
        f = base_normalize(raw)
        why = _why(f, vocab)
        if why is not None:
            out.append(DangerousFiller(i, raw, why))
    return out


def _why(f: str, vocab: list[tuple[str, str]]) -> str | None:
    words = f.split()
    if any(w in NEGATIONS for w in words):
        return "a negation: it flips the question"
    if any(w in NUMBER_WORDS for w in words) or any(c.isdigit() for c in f):
        return "a number: it changes the quantity asked about"
    if f in FUNCTION_WORDS or all(w in FUNCTION_WORDS for w in words):
        return None
    if has_cjk(f):
        if any(n in f for n in NEGATIONS if has_cjk(n)):
            return "a negation: it flips the question"
        for term, where in vocab:
            if f in term:
                return f"part of the policy's own term {term!r} ({where})"
        return _CONTENT if any(c in f for c in CONTENT_WORDS if has_cjk(c)) else None
    for term, where in vocab:
        if set(words) & (set(term.split()) - FUNCTION_WORDS):
            return f"a word of the policy's own term {term!r} ({where})"
    if any(w in CONTENT_WORDS for w in words):
        return _CONTENT
    return None


_CONTENT = "a built-in content word: a question that differs only by it asks something else"


def safe_fillers(cfg: SemanticConfig) -> list[str]:
    """The fillers a route may ignore: the policy's, less the dangerous ones, plus ``GREETINGS``,
    ``AUXILIARIES`` and ``HESITATIONS`` (with ``ASKING_WHETHER`` and ``ZH_POLITENESS``)."""
    bad = {d.index for d in dangerous_fillers(cfg)}
    builtin = [*GREETINGS, *ASKING_WHETHER, *ZH_POLITENESS, *AUXILIARIES, *HESITATIONS]
    return [f for i, f in enumerate(cfg.fillers) if i not in bad] + builtin


def typo_targets(cfg: SemanticConfig) -> list[str]:
    """The words a typo is corrected to (``cache.semantic.typos``): the policy's own terms and values."""
    return [t for t, _ in _vocabulary(cfg)]


def name_targets(cfg: SemanticConfig) -> list[str]:
    """The policy's entity names (slot values and aliases): the only targets of a four-letter swap."""
    return [a for e in cfg.slots for value, aliases in e.values.items() for a in (value, *aliases)]


def same_meaning_words(cfg: SemanticConfig) -> dict[str, str]:
    """word -> synonym group, for each ASCII word that is by itself a term of one group and a word of no
    term of another group (or of an intent term): a typo one edit from two such words of one group is
    still one correction (``cache.semantic.typos``)."""
    owners: dict[str, set[str]] = {}
    for g in cfg.synonyms:
        for t in g.terms:
            for w in base_normalize(t).split():
                owners.setdefault(w, set()).add(g.canonical)
    for i in cfg.intents:
        for t in i.terms:
            for w in base_normalize(t).split():
                owners.setdefault(w, set()).add(f"intent {i.name}")
    single = {base_normalize(t): g.canonical for g in cfg.synonyms for t in g.terms}
    return {w: c for w, c in single.items() if w.isascii() and w.isalpha() and owners.get(w) == {c}}


def taken_terms(cfg: SemanticConfig) -> list[str]:
    """What no derived synonym term may be (``cache.semantic.inflect``): intent terms, fillers, and slot
    and constraint values and aliases."""
    return [*(t for i in cfg.intents for t in i.terms), *cfg.fillers, *name_targets(cfg)] + [
        a for e in cfg.constraints for value, aliases in e.values.items() for a in (value, *aliases)
    ]


def known_words(cfg: SemanticConfig) -> list[str]:
    """Words never taken for a typo: the fillers and every built-in list (a real word is not a typo)."""
    return [
        *cfg.fillers, *FUNCTION_WORDS, *GREETINGS, *ASKING_WHETHER, *ZH_POLITENESS, *AUXILIARIES, *HESITATIONS,
        *NEGATIONS, *NUMBER_WORDS,
        *CONTENT_WORDS, *SIMILARITY_SAFE, *COMMON_WORDS,
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SynonymProblem:
    group: int  # in cfg.synonyms
    term: int  # in that group's terms
    message: str
    error: bool  # an error fails check-config; a warning is printed


def synonym_problems(cfg: SemanticConfig) -> list[SynonymProblem]:
    """What a synonym table maps that it must not (issue 25, tenth pass; ``check-config`` reports it, the
    way it reports dangerous fillers). A synonym term is rewritten to its canonical before anything else
    reads the question, so a term

    * equal to a slot or constraint value or alias maps the entity onto the canonical (the alias,
      normalised the same way, becomes the canonical, and every wording of the group would name the
      entity): an error;
    * equal to an intent's own wording (an intent term that is no canonical) of an intent that does not
      use the canonical takes that wording from the intent: an error;
    * holding, among other words, a slot value, or a constraint value other than the default of every
      intent that uses the canonical, hides it (a question naming it is read without it): a warning.
    """
    values: dict[str, tuple[str, str, str]] = {}
    for what, extractors in (("slot", cfg.slots), ("constraint", cfg.constraints)):
        for e in extractors:
            for value, aliases in e.values.items():
                for a in (value, *aliases):
                    values.setdefault(base_normalize(a), (what, str(e.slot), value))
    canonicals = {g.canonical for g in cfg.synonyms}
    wording = {base_normalize(t): i for i in cfg.intents for t in i.terms if t not in canonicals}
    out = []
    for gi, g in enumerate(cfg.synonyms):
        users = [i for i in cfg.intents if g.canonical in i.terms]
        for ti, t in enumerate(base_normalize(t) for t in g.terms):
            if t in values:
                what, slot, value = values[t]
                out.append(SynonymProblem(gi, ti, f"maps {what} {slot}={value!r} onto {g.canonical!r}", True))
                continue
            if t in wording and g.canonical not in wording[t].terms:
                out.append(SynonymProblem(gi, ti, f"takes intent {wording[t].name!r}'s own wording", True))
                continue
            hidden = sorted(
                f"{what} {slot}={value!r}"
                for a, (what, slot, value) in values.items()
                if _holds(t, a)
                and (what == "slot" or not users or any(i.constraints.get(slot) != value for i in users))
            )
            if hidden:
                out.append(
                    SynonymProblem(
                        gi, ti, f"holds {hidden[0]}: a question naming it is read without it", False
                    )
                )  # fmt: skip
    return out


def _holds(term: str, alias: str) -> bool:
    """Whether ``alias`` occurs in ``term`` as whole words (anywhere, for a Chinese alias)."""
    if has_cjk(alias):
        return alias in term
    return f" {alias} " in f" {term} "
