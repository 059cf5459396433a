"""A fifth labelled set for the semantic cache (issue 25, round 7): writes bench/data/semantic_heldout5.jsonl.

    python -m bench.semantic_heldout5_source

Written by hand before any code of round 7 changed, from docs/semantic-cache.md's description of the
four example policies (what each shop answers: a phone shop's battery, screen, weight, charging, water
resistance, price, order status and returns; an airline's baggage, check-in, flight status, change and
refund fees; a mobile operator's plans, data, roaming, top-ups, eSIM; a bank's card fees, limits,
activation, freezing, interest) and their catalogues (the phones, order numbers, cabins, flight
numbers, plans, countries, cards), and from ordinary customer phrasing, not from the matching rules'
code or the earlier sets' misses. English, Chinese and mixed zh/en. ``same``: a pair that deserves one
answer; ``different``: a near miss that changes one thing (a slot, a number, a unit or period, negation,
time, a direction, or the intent). Same-answer pairs are in one language (an answer is written in one).
No pair repeats a pair of the earlier sets (ten that did, written independently, were reworded before
the commit, against the texts only).

The whole set is ``heldout5``: run once, at the end of round 7, totals only; no rule is changed
looking at it. ``SEED`` shuffles the written order. Rows are not edited after being written.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from bench.semantic_independent_source import POLICY  # the four example policies, one table

SEED = 7025
OUT = Path("bench/data/semantic_heldout5.jsonl")

# (domain, lang, label, kind, cached, probe)
S, D = "same", "different"
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same answer ---
    ("shop", "en", S, "frame", "what's the iphone 15 going for?", "How much is the iPhone 15?"),
    ("shop", "en", S, "frame", "Pixel 8 - price?", "How much does the Pixel 8 cost?"),
    ("shop", "en", S, "frame", "Can you tell me the price of the Mate 60", "Mate 60 price"),
    ("shop", "en", S, "frame", "How much would a Galaxy S24 set me back?", "Galaxy S24 price"),
    ("shop", "en", S, "frame", "what is the cost of the xiaomi 14", "Xiaomi 14 price"),
    ("shop", "en", S, "greeting", "Hey! How heavy is the iPhone 15 Pro?", "iPhone 15 Pro weight"),
    ("shop", "en", S, "greeting", "Hi there, how long does the Mate 60 battery last?", "Mate 60 battery life"),
    ("shop", "en", S, "greeting", "Good afternoon. Is the Galaxy S24 waterproof?", "Is the Galaxy S24 waterproof?"),
    ("shop", "en", S, "greeting", "hello, what's your return policy", "Return policy"),
    ("shop", "en", S, "politeness", "Would you mind telling me the Pixel 8 screen size?", "Pixel 8 screen size"),
    ("shop", "en", S, "politeness", "Please let me know where my order SO2024120401 is", "Where is my order SO2024120401?"),
    ("shop", "en", S, "politeness", "Can I ask how fast the Xiaomi 14 charges?", "Xiaomi 14 charging speed"),
    ("shop", "en", S, "politeness", "I'd like to know the battery capacity of the Galaxy S24, thanks", "Galaxy S24 battery capacity"),
    ("shop", "en", S, "contraction", "How long's the Pixel 8 battery last?", "How long does the Pixel 8 battery last?"),
    ("shop", "en", S, "contraction", "Where's order PO2024070707?", "Where is order PO2024070707?"),
    ("shop", "en", S, "contraction", "What's the iPhone 15's screen size?", "iPhone 15 screen size"),
    ("shop", "en", S, "track", "Has order SO2024050505 shipped yet?", "Has my order SO2024050505 shipped?"),
    ("shop", "en", S, "track", "order SO2024030303 tracking", "Track order SO2024030303"),
    ("shop", "en", S, "track", "What's happening with my order PO2024090909?", "Status of order PO2024090909"),
    ("shop", "en", S, "track", "Any update on order SO2024111111?", "Where is my order SO2024111111?"),
    ("shop", "en", S, "typo", "How much is the Xiaomi 14 pirce?", "Xiaomi 14 price"),
    ("shop", "en", S, "typo", "Galaxy S24 scren size", "Galaxy S24 screen size"),
    ("shop", "en", S, "typo", "Is the Mate 60 watreproof?", "Is the Mate 60 waterproof?"),
    ("shop", "en", S, "typo", "iPhone 15 Pro charging sped", "iPhone 15 Pro charging speed"),
    ("shop", "en", S, "typo", "retrun policy", "return policy"),
    ("shop", "en", S, "word_order", "weight of the Pixel 8", "Pixel 8 weight"),
    ("shop", "en", S, "word_order", "Battery life, Xiaomi 14?", "Xiaomi 14 battery life"),
    ("shop", "en", S, "word_order", "the Galaxy S24, how much does it weigh?", "How much does the Galaxy S24 weigh?"),
    ("shop", "en", S, "filler", "Just curious, how big is the Mate 60 screen?", "Mate 60 screen size"),
    ("shop", "en", S, "filler", "Um, what's the iPhone 15 water resistance rating?", "iPhone 15 water resistance"),
    ("shop", "en", S, "filler", "OK, quick one - Pixel 8 charging speed?", "Pixel 8 charging speed"),
    ("shop", "en", S, "synonym", "How many mAh is the iPhone 15 battery?", "iPhone 15 battery capacity"),
    ("shop", "en", S, "synonym", "What's the display size of the Xiaomi 14?", "Xiaomi 14 screen size"),
    ("shop", "en", S, "synonym", "How many watts does the Mate 60 charge at?", "Mate 60 charging power"),
    ("shop", "en", S, "synonym", "Can I return something I bought?", "What is your return policy?"),
    ("shop", "en", S, "synonym", "What's the IP rating of the Pixel 8?", "Pixel 8 water resistance"),
    ("shop", "en", S, "case", "GALAXY S24 BATTERY LIFE", "galaxy s24 battery life"),
    ("shop", "en", S, "punctuation", "xiaomi 14 weight?!", "Xiaomi 14 weight"),
    ("shop", "zh", S, "frame", "华为Mate60卖多少", "华为Mate60多少钱"),
    ("shop", "zh", S, "frame", "小米14现在什么价格", "小米14价格"),
    ("shop", "zh", S, "frame", "谷歌Pixel 8要多少钱", "谷歌Pixel 8价格"),
    ("shop", "zh", S, "greeting", "你好，三星S24电池能用多久", "三星S24续航"),
    ("shop", "zh", S, "greeting", "在吗？苹果15防水吗", "苹果15防水吗"),
    ("shop", "zh", S, "politeness", "请问一下订单SO2024060606到哪里了", "订单SO2024060606到哪了"),
    ("shop", "zh", S, "politeness", "麻烦问下小米14屏幕多大", "小米14屏幕尺寸"),
    ("shop", "zh", S, "particle", "苹果15 pro多重啊", "苹果15 pro重量"),
    ("shop", "zh", S, "synonym", "怎么退货", "退货政策"),
    ("shop", "zh", S, "synonym", "华为Mate60电池多少毫安", "华为Mate60电池容量"),
    ("shop", "mixed", S, "mixed", "Pixel 8 卖多少钱", "Pixel 8 价格"),
    ("shop", "mixed", S, "mixed", "Galaxy S24 电池容量是多少", "Galaxy S24 电池容量"),
    # --- e-commerce, near misses ---
    ("shop", "en", D, "slot", "How much is the iPhone 15?", "How much is the iPhone 15 Pro?"),
    ("shop", "en", D, "slot", "Galaxy S24 battery life", "Pixel 8 battery life"),
    ("shop", "en", D, "slot", "Where is my order SO2024120401?", "Where is my order SO2024120402?"),
    ("shop", "en", D, "slot", "Mate 60 weight", "Xiaomi 14 weight"),
    ("shop", "en", D, "slot", "Is the iPhone 15 Pro waterproof?", "Is the iPhone 15 waterproof?"),
    ("shop", "en", D, "intent", "Pixel 8 battery life", "Pixel 8 battery capacity"),
    ("shop", "en", D, "intent", "Xiaomi 14 charging speed", "Xiaomi 14 charging time"),
    ("shop", "en", D, "intent", "How much is a Galaxy S24?", "How much is a Galaxy S24 case?"),
    ("shop", "en", D, "intent", "Mate 60 screen size", "Mate 60 screen resolution"),
    ("shop", "en", D, "intent", "iPhone 15 weight", "iPhone 15 thickness"),
    ("shop", "en", D, "intent", "What's the return policy?", "What's the warranty policy?"),
    ("shop", "en", D, "intent", "Where is my order SO2024050505?", "Can I cancel my order SO2024050505?"),
    ("shop", "en", D, "intent", "How much does the Pixel 8 cost?", "How much does it cost to repair the Pixel 8?"),
    ("shop", "en", D, "intent", "Xiaomi 14 waterproof?", "Xiaomi 14 dustproof?"),
    ("shop", "en", D, "intent", "Track order PO2024090909", "Return order PO2024090909"),
    ("shop", "en", D, "unit", "Galaxy S24 screen size in inches", "Galaxy S24 screen size in centimetres"),
    ("shop", "en", D, "unit", "iPhone 15 weight in grams", "iPhone 15 weight in ounces"),
    ("shop", "en", D, "unit", "How many hours does the Pixel 8 battery last?", "How many days does the Pixel 8 battery last?"),
    ("shop", "en", D, "number", "How much for 2 Pixel 8s?", "How much for 5 Pixel 8s?"),
    ("shop", "en", D, "number", "Can I return an item after 30 days?", "Can I return an item after 60 days?"),
    ("shop", "en", D, "number", "Is the Mate 60 waterproof to 1 metre?", "Is the Mate 60 waterproof to 5 metres?"),
    ("shop", "en", D, "negation", "Is the Galaxy S24 waterproof?", "Why isn't the Galaxy S24 waterproof?"),
    ("shop", "en", D, "negation", "Has order SO2024030303 shipped?", "Why hasn't order SO2024030303 shipped yet?"),
    ("shop", "en", D, "negation", "Can I return an opened phone?", "Can I return an unopened phone?"),
    ("shop", "en", D, "time", "How much is the iPhone 15?", "How much was the iPhone 15 at launch?"),
    ("shop", "en", D, "time", "Where is my order PO2024070707?", "Where was my order PO2024070707 yesterday?"),
    ("shop", "en", D, "time", "Xiaomi 14 price", "Xiaomi 14 price next month"),
    ("shop", "en", D, "direction", "How much does it cost to ship to London?", "How much does it cost to ship from London?"),
    ("shop", "en", D, "intent", "Does the Pixel 8 support fast charging?", "Does the Pixel 8 support wireless charging?"),
    ("shop", "en", D, "slot", "Xiaomi 14 battery capacity", "Xiaomi 14 Ultra battery capacity"),
    ("shop", "zh", D, "slot", "小米14多少钱", "小米14 pro多少钱"),
    ("shop", "zh", D, "slot", "苹果15重量", "三星S24重量"),
    ("shop", "zh", D, "slot", "订单SO2024060606到哪了", "订单SO2024060607到哪了"),
    ("shop", "zh", D, "intent", "华为Mate60续航多久", "华为Mate60充电多久"),
    ("shop", "zh", D, "intent", "订单SO2024060606到哪了", "订单SO2024060606怎么退款"),
    ("shop", "zh", D, "intent", "退货政策", "保修政策"),
    ("shop", "zh", D, "intent", "苹果15屏幕尺寸", "苹果15屏幕分辨率"),
    ("shop", "zh", D, "unit", "三星S24重量多少克", "三星S24重量多少斤"),
    ("shop", "zh", D, "negation", "苹果15防水吗", "苹果15为什么不防水"),
    ("shop", "zh", D, "time", "小米14价格", "小米14去年价格"),
    ("shop", "zh", D, "number", "七天可以退货吗", "三十天可以退货吗"),
    ("shop", "zh", D, "intent", "谷歌Pixel 8多少钱", "谷歌Pixel 8多少钱一个月分期"),
    ("shop", "mixed", D, "slot", "Pixel 8 要多少钱", "Pixel 8 Pro 要多少钱"),
    ("shop", "mixed", D, "intent", "Galaxy S24 电池容量", "Galaxy S24 电池寿命"),
    ("shop", "mixed", D, "slot", "order SO2024111111 到哪了", "order SO2024111112 到哪了"),
    # --- airline, same answer ---
    ("air", "en", S, "frame", "What's the checked bag limit in business class?", "Business class baggage allowance"),
    ("air", "en", S, "greeting", "Hello! Is CA982 on time today?", "Is flight CA982 on time?"),
    ("air", "en", S, "greeting", "hi, what's the status of UA858", "UA858 flight status"),
    ("air", "en", S, "politeness", "Could you let me know when online check-in opens?", "When does online check-in open?"),
    ("air", "en", S, "politeness", "Please tell me the premium economy change fee", "Premium economy change fee"),
    ("air", "en", S, "contraction", "What's the refund policy for first class?", "First class refund policy"),
    ("air", "en", S, "typo", "Ecomony baggage allowance", "Economy baggage allowance"),
    ("air", "en", S, "typo", "Is flight MU5101 delayd?", "Is flight MU5101 delayed?"),
    ("air", "en", S, "word_order", "carry-on allowance, economy", "Economy carry-on allowance"),
    ("air", "en", S, "filler", "Just wondering, how much luggage can I bring in first class?", "First class baggage allowance"),
    ("air", "en", S, "case", "BA39 FLIGHT STATUS", "ba39 flight status"),
    ("air", "en", S, "synonym", "How much to change my business class ticket?", "Business class change fee"),
    ("air", "zh", S, "greeting", "你好，MU5101航班状态", "MU5101航班状态"),
    ("air", "zh", S, "politeness", "请问经济舱可以带多少行李", "经济舱行李额"),
    ("air", "zh", S, "particle", "商务舱退票政策呢", "商务舱退票政策"),
    ("air", "zh", S, "frame", "头等舱改签费是多少", "头等舱改签费用"),
    ("air", "mixed", S, "mixed", "CA981 航班状态", "flight CA981 状态"),
    ("air", "mixed", S, "mixed", "business class 行李额", "business class 行李额是多少"),
    # --- airline, near misses ---
    ("air", "en", D, "slot", "Business class baggage allowance", "First class baggage allowance"),
    ("air", "en", D, "slot", "Is flight UA857 on time?", "Is flight UA858 on time?"),
    ("air", "en", D, "slot", "Premium economy change fee", "Economy change fee"),
    ("air", "en", D, "intent", "Economy change fee", "Economy cancellation fee"),
    ("air", "en", D, "intent", "When does online check-in open?", "When does the check-in counter open?"),
    ("air", "en", D, "intent", "First class baggage allowance", "First class lounge access"),
    ("air", "en", D, "intent", "Is flight CA981 on time?", "Which terminal does flight CA981 leave from?"),
    ("air", "en", D, "unit", "Business class baggage allowance in kilos", "Business class baggage allowance in pounds"),
    ("air", "en", D, "number", "Can I bring 1 carry-on in economy?", "Can I bring 2 carry-ons in economy?"),
    ("air", "en", D, "negation", "Is my business class ticket refundable?", "Is my business class ticket non-refundable?"),
    ("air", "en", D, "time", "Is flight MU5101 delayed?", "Will flight MU5101 be delayed tomorrow?"),
    ("air", "en", D, "direction", "Flight CA981 from Beijing to New York status", "Flight CA981 from New York to Beijing status"),
    ("air", "zh", D, "slot", "头等舱改签费用", "商务舱改签费用"),
    ("air", "zh", D, "slot", "CA981航班状态", "CA983航班状态"),
    ("air", "zh", D, "intent", "经济舱行李额", "经济舱餐食"),
    ("air", "zh", D, "unit", "商务舱行李额多少公斤", "商务舱行李额多少磅"),
    ("air", "zh", D, "negation", "经济舱可以改签吗", "经济舱为什么不能改签"),
    ("air", "mixed", D, "slot", "business class 行李额", "economy class 行李额"),
    ("air", "mixed", D, "time", "CA981 今天准点吗", "CA981 昨天准点吗"),
    # --- mobile plans, same answer ---
    ("tel", "en", S, "frame", "How much does the Family plan cost a month?", "Family plan price per month"),
    ("tel", "en", S, "frame", "What's the Plus plan going for per month?", "How much is the Plus plan per month?"),
    ("tel", "en", S, "greeting", "Hi! Does the Max plan include 5G?", "Does the Max plan support 5G?"),
    ("tel", "en", S, "greeting", "Hello, what are the roaming rates in Korea?", "Roaming rate in Korea"),
    ("tel", "en", S, "politeness", "Could you tell me how much data the Lite plan has?", "Lite plan data allowance"),
    ("tel", "en", S, "politeness", "Please explain how to activate an eSIM", "How do I activate an eSIM?"),
    ("tel", "en", S, "contraction", "How's roaming priced in the USA?", "USA roaming rate"),
    ("tel", "en", S, "typo", "Thaliand roaming rate", "Thailand roaming rate"),
    ("tel", "en", S, "word_order", "the data allowance on the Max plan", "Max plan data allowance"),
    ("tel", "en", S, "filler", "Quick question, how do I top up my prepaid?", "How do I top up?"),
    ("tel", "en", S, "case", "LITE PLAN PRICE PER MONTH", "lite plan price per month"),
    ("tel", "en", S, "synonym", "How can I see how much data I have left?", "How do I check my data balance?"),
    ("tel", "zh", S, "greeting", "你好，韩国漫游资费是多少", "韩国漫游资费"),
    ("tel", "zh", S, "politeness", "请问Max套餐每月多少钱", "Max套餐每月价格"),
    ("tel", "zh", S, "frame", "泰国漫游怎么收费", "泰国漫游资费"),
    ("tel", "zh", S, "particle", "预付费卡怎么充值呢", "怎么充值"),
    ("tel", "mixed", S, "mixed", "Family plan 每月多少钱", "Family plan 每月价格"),
    ("tel", "mixed", S, "mixed", "Lite套餐 流量是多少", "Lite套餐 流量多少"),
    # --- mobile plans, near misses ---
    ("tel", "en", D, "slot", "Roaming rate in the USA", "Roaming rate in the UK"),
    ("tel", "en", D, "slot", "Lite plan data allowance", "Plus plan data allowance"),
    ("tel", "en", D, "period", "How much is the Max plan per month?", "How much is the Max plan per week?"),
    ("tel", "en", D, "period", "Family plan price per year", "Family plan price per month"),
    ("tel", "en", D, "intent", "How do I activate an eSIM?", "How do I transfer an eSIM?"),
    ("tel", "en", D, "intent", "Max plan data allowance", "Max plan text allowance"),
    ("tel", "en", D, "intent", "Roaming rate in Japan", "Data roaming speed in Japan"),
    ("tel", "en", D, "number", "Can I add 3 lines to the Family plan?", "Can I add 6 lines to the Family plan?"),
    ("tel", "en", D, "negation", "Does the Plus plan include roaming?", "Why doesn't the Plus plan include roaming?"),
    ("tel", "en", D, "time", "How do I top up?", "Why did my top up fail yesterday?"),
    ("tel", "en", D, "direction", "How much are calls from Japan to the UK?", "How much are calls from the UK to Japan?"),
    ("tel", "zh", D, "slot", "泰国漫游资费", "美国漫游资费"),
    ("tel", "zh", D, "slot", "Max套餐每月价格", "Plus套餐每月价格"),
    ("tel", "zh", D, "period", "家庭套餐每月价格", "家庭套餐每天价格"),
    ("tel", "zh", D, "intent", "怎么充值", "怎么查话费"),
    ("tel", "zh", D, "negation", "Plus套餐支持5G吗", "Plus套餐为什么不支持5G"),
    ("tel", "mixed", D, "slot", "Family plan 每月多少钱", "Lite plan 每月多少钱"),
    ("tel", "mixed", D, "intent", "Lite套餐 流量多少", "Lite套餐 通话多少分钟"),
    # --- bank cards, same answer ---
    ("bank", "en", S, "frame", "What's the yearly fee for the Classic card?", "Classic card annual fee"),
    ("bank", "en", S, "frame", "How much does the Gold card charge per year?", "Gold card annual fee"),
    ("bank", "en", S, "greeting", "Hi, how do I activate my new card?", "How do I activate my card?"),
    ("bank", "en", S, "greeting", "Hello, what's the interest rate on the Gold card?", "Gold card interest rate"),
    ("bank", "en", S, "politeness", "Can you please tell me how to change my PIN?", "How do I change my PIN?"),
    ("bank", "en", S, "politeness", "I'd like to know the Platinum card cash advance fee", "Platinum card cash advance fee"),
    ("bank", "en", S, "contraction", "What's the contactless limit?", "What is the contactless limit?"),
    ("bank", "en", S, "typo", "How do I freze my card?", "How do I freeze my card?"),
    ("bank", "en", S, "word_order", "foreign transaction fee on the Gold card", "Gold card foreign transaction fee"),
    ("bank", "en", S, "filler", "Um, I lost my card - what do I do?", "I lost my card, what should I do?"),
    ("bank", "en", S, "case", "PLATINUM CARD ANNUAL FEE", "platinum card annual fee"),
    ("bank", "en", S, "synonym", "what's the APR on platinum", "Platinum card interest rate"),
    ("bank", "zh", S, "greeting", "你好，白金卡年费是多少", "白金卡年费"),
    ("bank", "zh", S, "politeness", "请问怎么激活信用卡", "怎么激活信用卡"),
    ("bank", "zh", S, "particle", "普卡利率是多少呀", "普卡利率"),
    ("bank", "zh", S, "frame", "金卡年费要多少钱", "金卡年费是多少"),
    ("bank", "mixed", S, "mixed", "Platinum card 年费多少", "Platinum card 年费是多少"),
    ("bank", "mixed", S, "mixed", "Gold card 利率", "Gold card 利率是多少"),
    # --- bank cards, near misses ---
    ("bank", "en", D, "slot", "interest rate on the Classic card", "interest rate on the Gold card"),
    ("bank", "en", D, "slot", "Platinum card cash advance fee?", "Classic card cash advance fee?"),
    ("bank", "en", D, "intent", "annual fee for the Gold card", "late payment fee for the Gold card"),
    ("bank", "en", D, "intent", "How do I change my PIN?", "I forgot my PIN"),
    ("bank", "en", D, "intent", "What is the contactless limit?", "What is the ATM withdrawal limit?"),
    ("bank", "en", D, "intent", "How do I activate my card?", "How do I close my card account?"),
    ("bank", "en", D, "direction", "How do I raise my credit limit?", "How do I lower my credit limit?"),
    ("bank", "en", D, "unit", "Platinum card annual fee in euros", "Platinum card annual fee in dollars"),
    ("bank", "en", D, "number", "Is there a fee to transfer 1000 dollars?", "Is there a fee to transfer 10000 dollars?"),
    ("bank", "en", D, "negation", "Does the Classic card have an annual fee?", "Why doesn't the Classic card have an annual fee?"),
    ("bank", "en", D, "time", "What is my card balance?", "What was my card balance last month?"),
    ("bank", "zh", D, "slot", "白金卡年费", "金卡年费"),
    ("bank", "zh", D, "slot", "普卡利率", "白金卡利率"),
    ("bank", "zh", D, "intent", "怎么激活信用卡", "怎么挂失信用卡"),
    ("bank", "zh", D, "intent", "金卡年费是多少", "金卡额度是多少"),
    ("bank", "zh", D, "negation", "金卡有年费吗", "金卡为什么没有年费"),
    ("bank", "mixed", D, "slot", "Platinum card 年费多少", "Gold card 年费多少"),
    ("bank", "mixed", D, "intent", "Gold card 利率", "Gold card 额度"),
    # --- more near misses, every domain ---
    ("shop", "en", D, "intent", "How do I return my order SO2024120401?", "How do I exchange my order SO2024120401?"),
    ("air", "en", D, "number", "Can I check 1 bag in premium economy?", "Can I check 2 bags in premium economy?"),
    ("tel", "en", D, "intent", "Does the Max plan include hotspot?", "Does the Max plan include international calls?"),
    ("bank", "en", D, "intent", "How do I freeze my card?", "How do I report my card stolen?"),
]  # fmt: skip


def rows() -> list[dict[str, object]]:
    out = [
        {
            "id": f"h5-{domain}-{i:03d}", "split": "heldout5", "seed": SEED, "round": 7,
            "domain": domain, "policy": POLICY[domain], "lang": lang, "label": label, "kind": kind,
            "cached": cached, "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS)
    ]  # fmt: skip
    random.Random(SEED).shuffle(out)
    return out


def main() -> None:
    rs = rows()
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rs))
    same = sum(r["label"] == S for r in rs)
    print(f"{OUT} heldout5: {len(rs)} pairs ({same} same, {len(rs) - same} different)")


if __name__ == "__main__":
    main()
