"""A fourth labelled set for the semantic cache (issue 25, round 6): writes bench/data/semantic_heldout4.jsonl.

    python -m bench.semantic_heldout4_source

Written by hand before any code of round 6 changed, from the example policies' documentation
(docs/semantic-cache.md: what each shop answers) and their catalogues (products, order numbers,
cabins, flight numbers, plans, countries, cards), not from the matching rules' code: the wordings are
how customers write to a help desk (greetings, contractions, "how much is" / "what does ... cost" /
"price of", "where is my" / "track", 多少钱 / 价格 / 什么价, typos, fillers, word order), English,
Chinese and mixed zh/en. ``same``: a pair that deserves one answer; ``different``: a near miss that
changes one thing (a slot, a number, a unit or period, negation, time, a direction, or the intent).
Same-answer pairs are in one language (an answer is written in one; cross-language pairs are a miss
by design and would only measure that).

Split, declared here and not chosen by hand: a pair is ``tune4`` when the first byte of
SHA-256(f"{SEED}|{cached}|{probe}") is below 128, else ``heldout4``. Rules may be changed looking at
``tune4``; ``heldout4`` is run once, at the end of the round, totals only. ``SEED`` also shuffles the
written order. Rows are not edited after being written.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import orjson

from bench.semantic_independent_source import POLICY  # the four example policies, one table

SEED = 6025
OUT = Path("bench/data/semantic_heldout4.jsonl")

# (domain, lang, label, kind, cached, probe)
S, D = "same", "different"
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same answer ---
    ("shop", "en", S, "frame", "How much is the Pixel 8?", "What does the Pixel 8 cost?"),
    ("shop", "en", S, "frame", "What's the price of the Galaxy S24?", "How much does a Galaxy S24 cost?"),
    ("shop", "en", S, "frame", "Price of the Xiaomi 14?", "how much is xiaomi 14"),
    ("shop", "en", S, "frame", "How much does the iPhone 15 Pro cost?", "iPhone 15 Pro, how much?"),
    ("shop", "en", S, "frame", "What is the Mate 60 price?", "How much is a Mate 60 these days?"),
    ("shop", "en", S, "greeting", "Hello, how much is the iPhone 15?", "iPhone 15 price"),
    ("shop", "en", S, "greeting", "Hey there! What's the Pixel 8's battery life?", "Pixel 8 battery life"),
    ("shop", "en", S, "greeting", "Good morning, I'd like to know the weight of the Galaxy S24", "How heavy is the Galaxy S24?"),
    ("shop", "en", S, "politeness", "Could you please tell me how big the Xiaomi 14 screen is?", "Xiaomi 14 screen size"),
    ("shop", "en", S, "politeness", "Thanks in advance - what's the return policy?", "What is your return policy?"),
    ("shop", "en", S, "contraction", "Where's my order SO2024031501?", "Where is my order SO2024031501?"),
    ("shop", "en", S, "contraction", "What's the Mate 60's screen size?", "What is the screen size of the Mate 60?"),
    ("shop", "en", S, "contraction", "Isn't my order PO2024062011 shipped yet?", "Has my order PO2024062011 shipped?"),
    ("shop", "en", S, "track", "Track order SO2024080902", "Where is my order SO2024080902?"),
    ("shop", "en", S, "track", "Can you track my order PO2024051530?", "Order PO2024051530 status"),
    ("shop", "en", S, "track", "What's the status of order SO2024100100?", "Where's order SO2024100100 now?"),
    ("shop", "en", S, "track", "I want to track my package, order SO2024112233", "Where is my order SO2024112233?"),
    ("shop", "en", S, "typo", "How much is the Galaxy S24?", "how much is the galxy s24"),
    ("shop", "en", S, "typo", "Pixel 8 water resistance", "Pixel 8 water resistnce"),
    ("shop", "en", S, "typo", "What is the Xiaomi 14 battery capacity?", "What is the Xiaomi 14 batery capacity?"),
    ("shop", "en", S, "typo", "iPhone 15 weight", "iphone 15 weigth"),
    ("shop", "en", S, "word_order", "Galaxy S24 screen size", "screen size of Galaxy S24"),
    ("shop", "en", S, "word_order", "How fast does the Pixel 8 charge?", "Pixel 8 charging speed"),
    ("shop", "en", S, "word_order", "iPhone 15 Pro battery capacity", "battery capacity of the iPhone 15 Pro"),
    ("shop", "en", S, "filler", "So, um, how heavy is the Mate 60?", "Mate 60 weight"),
    ("shop", "en", S, "filler", "Just wondering, is the iPhone 15 waterproof?", "Is the iPhone 15 waterproof?"),
    ("shop", "en", S, "filler", "Quick one: Xiaomi 14 price?", "Xiaomi 14 price"),
    ("shop", "en", S, "synonym", "How long does the Galaxy S24 battery last?", "Galaxy S24 battery life"),
    ("shop", "en", S, "synonym", "Is the Pixel 8 waterproof?", "Pixel 8 water resistance rating"),
    ("shop", "en", S, "synonym", "How much does the Xiaomi 14 weigh?", "Xiaomi 14 weight"),
    ("shop", "en", S, "synonym", "What's the charging wattage of the iPhone 15?", "iPhone 15 charging power"),
    ("shop", "en", S, "synonym", "How many days do I have to return an item?", "What is the return window?"),
    ("shop", "en", S, "synonym", "Mate 60 battery size in mAh", "Mate 60 battery capacity"),
    ("shop", "en", S, "case", "PIXEL 8 PRICE", "pixel 8 price"),
    ("shop", "en", S, "punctuation", "iphone 15 pro weight???", "iPhone 15 Pro weight"),
    ("shop", "zh", S, "frame", "小米14多少钱", "小米14价格"),
    ("shop", "zh", S, "frame", "华为Mate60什么价", "华为Mate60多少钱"),
    ("shop", "zh", S, "frame", "三星S24的价格是多少", "三星S24多少钱"),
    ("shop", "zh", S, "frame", "苹果15卖多少钱", "苹果15价格"),
    ("shop", "zh", S, "greeting", "你好，请问小米14多重", "小米14重量"),
    ("shop", "zh", S, "greeting", "您好，我的订单SO2024090311到哪了", "订单SO2024090311到哪了"),
    ("shop", "zh", S, "politeness", "麻烦帮我查一下订单PO2024010199的物流", "订单PO2024010199物流状态"),
    ("shop", "zh", S, "politeness", "请问谷歌Pixel 8的屏幕多大", "谷歌Pixel 8屏幕尺寸"),
    ("shop", "zh", S, "synonym", "华为Mate60电池容量多少", "华为Mate60电池多少毫安时"),
    ("shop", "zh", S, "synonym", "苹果15防水吗", "苹果15防水等级"),
    ("shop", "zh", S, "synonym", "退货政策是什么", "怎么退货"),
    ("shop", "zh", S, "word_order", "三星S24续航多久", "续航多久，三星S24"),
    ("shop", "zh", S, "particle", "小米14充电功率多少呀", "小米14充电功率多少"),
    ("shop", "mixed", S, "mixed", "Pixel 8 多少钱", "Pixel 8 价格"),
    ("shop", "mixed", S, "mixed", "iPhone 15 Pro 重量是多少", "iPhone 15 Pro 有多重"),
    ("shop", "mixed", S, "mixed", "订单 SO2024070788 status", "order SO2024070788 status"),
    ("shop", "mixed", S, "mixed", "Galaxy S24 屏幕 多大", "Galaxy S24 屏幕尺寸"),
    # --- e-commerce, near misses ---
    ("shop", "en", D, "slot", "How much is the Pixel 8?", "How much is the Pixel 8 Pro?"),
    ("shop", "en", D, "slot", "What does the iPhone 15 cost?", "What does the iPhone 15 Pro cost?"),
    ("shop", "en", D, "slot", "Price of the Galaxy S24?", "Price of the Galaxy S24 Ultra?"),
    ("shop", "en", D, "slot", "How heavy is the Xiaomi 14?", "How heavy is the Xiaomi 14 Pro?"),
    ("shop", "en", D, "slot", "Where is my order SO2024031501?", "Where is my order SO2024031502?"),
    ("shop", "en", D, "slot", "Track order PO2024051530", "Track order SO2024051530"),
    ("shop", "en", D, "slot", "Mate 60 screen size", "Mate 60 Pro screen size"),
    ("shop", "en", D, "slot", "Pixel 8 battery life", "iPhone 15 battery life"),
    ("shop", "en", D, "number", "How much are 2 Pixel 8s?", "How much are 3 Pixel 8s?"),
    ("shop", "en", D, "number", "How much for one iPhone 15?", "How much for two iPhone 15s?"),
    ("shop", "en", D, "unit", "Galaxy S24 screen size in inches", "Galaxy S24 screen size in centimeters"),
    ("shop", "en", D, "unit", "How many grams does the Pixel 8 weigh?", "How many ounces does the Pixel 8 weigh?"),
    ("shop", "en", D, "unit", "iPhone 15 battery life in hours", "iPhone 15 battery life in days"),
    ("shop", "en", D, "negation", "Is the Mate 60 waterproof?", "Why is the Mate 60 not waterproof?"),
    ("shop", "en", D, "negation", "Can I return an opened item?", "Can I return an unopened item?"),
    ("shop", "en", D, "negation", "My order SO2024080902 has shipped", "My order SO2024080902 hasn't shipped"),
    ("shop", "en", D, "time", "How much is the Xiaomi 14?", "How much was the Xiaomi 14 at launch?"),
    ("shop", "en", D, "time", "Where is my order SO2024100100?", "Where will my order SO2024100100 be tomorrow?"),
    ("shop", "en", D, "time", "What's the Pixel 8 price?", "What will the Pixel 8 price be on Black Friday?"),
    ("shop", "en", D, "intent", "How much is the iPhone 15?", "How much is the iPhone 15 screen repair?"),
    ("shop", "en", D, "intent", "How much is the Galaxy S24?", "How much is the Galaxy S24 case?"),
    ("shop", "en", D, "intent", "What does the Pixel 8 cost?", "What does the Pixel 8 cost to ship?"),
    ("shop", "en", D, "intent", "Where is my order SO2024112233?", "Can I cancel my order SO2024112233?"),
    ("shop", "en", D, "intent", "Track order SO2024090311", "Change the address on order SO2024090311"),
    ("shop", "en", D, "intent", "How long does the Mate 60 battery last?", "How long does the Mate 60 take to charge?"),
    ("shop", "en", D, "intent", "Xiaomi 14 battery capacity", "Xiaomi 14 battery replacement"),
    ("shop", "en", D, "intent", "What is your return policy?", "What is your warranty policy?"),
    ("shop", "en", D, "intent", "Is the Pixel 8 waterproof?", "Is the Pixel 8 dustproof?"),
    ("shop", "en", D, "intent", "iPhone 15 screen size", "iPhone 15 screen resolution"),
    ("shop", "en", D, "intent", "Galaxy S24 weight", "Galaxy S24 thickness"),
    ("shop", "en", D, "intent", "How fast does the iPhone 15 charge?", "Does the iPhone 15 charge wirelessly?"),
    ("shop", "en", D, "comparison", "How heavy is the Pixel 8?", "Is the Pixel 8 heavier than the iPhone 15?"),
    ("shop", "en", D, "direction", "How do I return an item?", "How do I exchange an item?"),
    ("shop", "zh", D, "slot", "小米14多少钱", "小米14 Ultra多少钱"),
    ("shop", "zh", D, "slot", "苹果15价格", "苹果15 Pro价格"),
    ("shop", "zh", D, "slot", "订单SO2024090311到哪了", "订单SO2024090312到哪了"),
    ("shop", "zh", D, "unit", "华为Mate60重多少克", "华为Mate60重多少斤"),
    ("shop", "zh", D, "number", "买两台小米14多少钱", "买三台小米14多少钱"),
    ("shop", "zh", D, "negation", "三星S24防水吗", "三星S24为什么不防水"),
    ("shop", "zh", D, "intent", "小米14多少钱", "小米14维修多少钱"),
    ("shop", "zh", D, "intent", "华为Mate60电池容量多少", "华为Mate60电池更换多少钱"),
    ("shop", "zh", D, "intent", "订单SO2024070701到哪了", "订单SO2024070701怎么取消"),
    ("shop", "zh", D, "intent", "退货政策是什么", "换货政策是什么"),
    ("shop", "zh", D, "time", "苹果15多少钱", "苹果15下个月多少钱"),
    ("shop", "zh", D, "intent", "谷歌Pixel 8屏幕多大", "谷歌Pixel 8屏幕分辨率多少"),
    ("shop", "mixed", D, "slot", "Pixel 8 多少钱", "Pixel 8 Pro 多少钱"),
    ("shop", "mixed", D, "intent", "Galaxy S24 屏幕多大", "Galaxy S24 屏幕坏了怎么办"),
    ("shop", "mixed", D, "intent", "iPhone 15 电池容量", "iPhone 15 电池健康"),
    ("shop", "mixed", D, "unit", "Xiaomi 14 重量 多少克", "Xiaomi 14 重量 多少磅"),
    # --- airline, same answer ---
    ("air", "en", S, "frame", "How much baggage can I check in economy?", "Economy baggage allowance"),
    ("air", "en", S, "greeting", "Hi, is flight CA981 on time?", "Is flight CA981 on time?"),
    ("air", "en", S, "contraction", "What's the status of flight MU5101?", "MU5101 flight status"),
    ("air", "en", S, "frame", "How much does it cost to change a business class ticket?", "Business class change fee"),
    ("air", "en", S, "politeness", "Could you tell me the carry-on allowance for first class?", "First class carry-on allowance"),
    ("air", "en", S, "typo", "Premium economy bagage allowance", "Premium economy baggage allowance"),
    ("air", "en", S, "word_order", "refund policy for economy", "Economy refund policy"),
    ("air", "en", S, "case", "UA857 FLIGHT STATUS", "ua857 flight status"),
    ("air", "en", S, "filler", "Just checking, is BA38 delayed?", "Is BA38 delayed?"),
    ("air", "en", S, "synonym", "How much luggage can I take in business class?", "Business class baggage allowance"),
    ("air", "zh", S, "frame", "经济舱改签费多少钱", "经济舱改签费用"),
    ("air", "zh", S, "greeting", "你好，CA981航班准点吗", "CA981航班状态"),
    ("air", "zh", S, "politeness", "请问商务舱行李额是多少", "商务舱行李额"),
    ("air", "zh", S, "particle", "头等舱退票政策是什么呢", "头等舱退票政策"),
    ("air", "mixed", S, "mixed", "flight MU5101 状态", "MU5101 航班状态"),
    # --- airline, near misses ---
    ("air", "en", D, "slot", "Economy baggage allowance", "Premium economy baggage allowance"),
    ("air", "en", D, "slot", "Is flight CA981 on time?", "Is flight CA982 on time?"),
    ("air", "en", D, "unit", "Economy baggage allowance in kg", "Economy baggage allowance in pounds"),
    ("air", "en", D, "intent", "Business class change fee", "Business class upgrade fee"),
    ("air", "en", D, "intent", "First class carry-on allowance", "First class checked baggage allowance"),
    ("air", "en", D, "negation", "Is my economy ticket refundable?", "Why is my economy ticket non-refundable?"),
    ("air", "en", D, "time", "Is flight BA38 delayed?", "Was flight BA38 delayed yesterday?"),
    ("air", "en", D, "direction", "Is flight CA981 from Beijing on time?", "Is flight CA981 to Beijing on time?"),
    ("air", "en", D, "number", "Can I check 2 bags in economy?", "Can I check 3 bags in economy?"),
    ("air", "zh", D, "slot", "经济舱行李额", "商务舱行李额"),
    ("air", "zh", D, "intent", "经济舱改签费多少钱", "经济舱退票费多少钱"),
    ("air", "zh", D, "unit", "经济舱托运行李多少公斤", "经济舱托运行李多少磅"),
    ("air", "zh", D, "negation", "头等舱可以退票吗", "头等舱为什么不能退票"),
    ("air", "mixed", D, "slot", "flight MU5101 状态", "flight MU5102 状态"),
    # --- mobile plans, same answer ---
    ("tel", "en", S, "frame", "How much is the Max plan?", "What does the Max plan cost per month?"),
    ("tel", "en", S, "frame", "What's the price of the Lite plan a month?", "How much is the Lite plan per month?"),
    ("tel", "en", S, "greeting", "Hello! How much data is on the Plus plan?", "Plus plan data allowance"),
    ("tel", "en", S, "contraction", "What's the roaming rate in Japan?", "What is the roaming rate in Japan?"),
    ("tel", "en", S, "typo", "Does the Famly plan support 5G?", "Does the Family plan support 5G?"),
    ("tel", "en", S, "politeness", "Could you tell me how to top up my prepaid sim?", "How do I top up?"),
    ("tel", "en", S, "filler", "Quick question, how do I activate an eSIM?", "How do I activate an eSIM?"),
    ("tel", "en", S, "case", "MAX PLAN HOTSPOT ALLOWANCE", "max plan hotspot allowance"),
    ("tel", "en", S, "word_order", "roaming rate for Thailand", "Thailand roaming rate"),
    ("tel", "zh", S, "frame", "家庭套餐每月多少钱", "家庭套餐每月价格"),
    ("tel", "zh", S, "greeting", "你好，日本漫游资费是多少", "日本漫游资费"),
    ("tel", "zh", S, "politeness", "请问怎么充值", "怎么充值"),
    ("tel", "mixed", S, "mixed", "Plus套餐 流量多少", "Plus套餐 流量有多少"),
    # --- mobile plans, near misses ---
    ("tel", "en", D, "slot", "How much is the Plus plan per month?", "How much is the Max plan per month?"),
    ("tel", "en", D, "period", "What does the Lite plan cost per month?", "What does the Lite plan cost per year?"),
    ("tel", "en", D, "slot", "Roaming rate in Japan", "Roaming rate in Korea"),
    ("tel", "en", D, "intent", "Roaming rate in the UK", "Call rate to the UK"),
    ("tel", "en", D, "intent", "Plus plan data allowance", "Plus plan hotspot allowance"),
    ("tel", "en", D, "negation", "Does the Lite plan support 5G?", "Why doesn't the Lite plan support 5G?"),
    ("tel", "en", D, "intent", "How do I activate an eSIM?", "How do I deactivate an eSIM?"),
    ("tel", "en", D, "number", "How much is the Family plan for 2 lines?", "How much is the Family plan for 4 lines?"),
    ("tel", "en", D, "intent", "How do I port my number?", "How long does it take to port my number?"),
    ("tel", "zh", D, "slot", "日本漫游资费", "韩国漫游资费"),
    ("tel", "zh", D, "period", "家庭套餐每月多少钱", "家庭套餐每年多少钱"),
    ("tel", "zh", D, "intent", "怎么充值", "怎么退费"),
    ("tel", "mixed", D, "slot", "Plus套餐 流量多少", "Max套餐 流量多少"),
    # --- bank cards, same answer ---
    ("bank", "en", S, "frame", "How much is the annual fee on the Gold card?", "Gold card annual fee"),
    ("bank", "en", S, "frame", "What does the Platinum card cost per year?", "Platinum card annual fee"),
    ("bank", "en", S, "greeting", "Hi, I lost my card, what should I do?", "I lost my card, what should I do?"),
    ("bank", "en", S, "contraction", "What's the interest rate on the Classic card?", "What is the interest rate on the Classic card?"),
    ("bank", "en", S, "typo", "Platinun card foreign transaction fee", "Platinum card foreign transaction fee"),
    ("bank", "en", S, "politeness", "Could you please tell me how to freeze my card?", "How do I freeze my card?"),
    ("bank", "en", S, "filler", "Quick question: how do I activate my card?", "How do I activate my card?"),
    ("bank", "en", S, "word_order", "cash advance fee for the Gold card", "Gold card cash advance fee"),
    ("bank", "en", S, "case", "HOW DO I CHANGE MY PIN", "how do i change my pin"),
    ("bank", "zh", S, "frame", "金卡年费多少钱", "金卡年费是多少"),
    ("bank", "zh", S, "greeting", "你好，卡丢了怎么办", "卡丢了怎么办"),
    ("bank", "zh", S, "politeness", "请问白金卡利率是多少", "白金卡利率"),
    ("bank", "mixed", S, "mixed", "Gold card 年费 多少", "Gold card 年费是多少"),
    # --- bank cards, near misses ---
    ("bank", "en", D, "slot", "Gold card annual fee", "Platinum card annual fee"),
    ("bank", "en", D, "intent", "Classic card interest rate", "Classic card cash advance fee"),
    ("bank", "en", D, "intent", "How do I freeze my card?", "How do I unfreeze my card?"),
    ("bank", "en", D, "direction", "How do I increase my credit limit?", "How do I decrease my credit limit?"),
    ("bank", "en", D, "negation", "Does the Platinum card charge a foreign transaction fee?", "Why doesn't the Platinum card charge a foreign transaction fee?"),
    ("bank", "en", D, "unit", "Gold card annual fee in dollars", "Gold card annual fee in euros"),
    ("bank", "en", D, "intent", "How do I activate my card?", "How do I cancel my card?"),
    ("bank", "en", D, "time", "When is my payment due?", "When was my last payment?"),
    ("bank", "en", D, "number", "What's the fee to withdraw 100 dollars abroad?", "What's the fee to withdraw 500 dollars abroad?"),
    ("bank", "zh", D, "slot", "金卡年费多少钱", "普卡年费多少钱"),
    ("bank", "zh", D, "intent", "卡丢了怎么办", "卡过期了怎么办"),
    ("bank", "zh", D, "intent", "怎么冻结卡", "怎么解冻卡"),
    ("bank", "mixed", D, "slot", "Gold card 年费 多少", "Classic card 年费 多少"),
    # --- more, every domain ---
    ("shop", "en", S, "frame", "What would a Pixel 8 cost me?", "Pixel 8 price"),
    ("shop", "en", S, "greeting", "Hi! Where's my order PO2024040404?", "Where is my order PO2024040404?"),
    ("shop", "en", S, "contraction", "How long's the iPhone 15 battery last?", "How long does the iPhone 15 battery last?"),
    ("shop", "en", S, "frame", "Galaxy S24 - what's it cost?", "How much is the Galaxy S24?"),
    ("shop", "zh", S, "frame", "小米14要多少钱", "小米14多少钱"),
    ("air", "en", S, "frame", "What's the fee to change an economy ticket?", "Economy change fee"),
    ("air", "en", S, "contraction", "When's online check-in open?", "When does online check-in open?"),
    ("tel", "en", S, "frame", "What's the monthly price of the Plus plan?", "Plus plan price per month"),
    ("tel", "en", S, "greeting", "Hey, how do I check my data balance?", "How do I check my data balance?"),
    ("bank", "en", S, "frame", "How much is the replacement card fee?", "Replacement card fee"),
    ("bank", "en", S, "greeting", "Hello, what is the contactless limit?", "What is the contactless limit?"),
    ("shop", "en", D, "slot", "What would a Pixel 8 cost me?", "What would a Pixel 7 cost me?"),
    ("shop", "en", D, "number", "How much for 2 Galaxy S24s?", "How much for 20 Galaxy S24s?"),
    ("shop", "en", D, "intent", "How much is the Mate 60?", "How much is the Mate 60 trade-in worth?"),
    ("shop", "en", D, "intent", "Where is my order PO2024040404?", "Where is my refund for order PO2024040404?"),
    ("shop", "en", D, "negation", "Does the Xiaomi 14 support fast charging?", "Why doesn't the Xiaomi 14 support fast charging?"),
    ("shop", "en", D, "unit", "iPhone 15 charging power in watts", "iPhone 15 charging time in hours"),
    ("shop", "zh", D, "intent", "小米14多少钱", "小米14多少钱回收"),
    ("shop", "zh", D, "number", "苹果15多少钱", "苹果15两台多少钱"),
    ("shop", "mixed", D, "intent", "Mate 60 多少钱", "Mate 60 保修多久"),
    ("air", "en", D, "slot", "What's the fee to change an economy ticket?", "What's the fee to change a first class ticket?"),
    ("air", "en", D, "intent", "When does online check-in open?", "When does online check-in close?"),
    ("air", "zh", D, "intent", "CA981航班准点吗", "CA981航班在哪个登机口"),
    ("tel", "en", D, "intent", "How do I check my data balance?", "How do I check my account balance?"),
    ("tel", "en", D, "slot", "Does the Prepaid plan support 5G?", "Does the Family plan support 5G?"),
    ("tel", "zh", D, "intent", "日本漫游资费", "日本通话资费"),
    ("bank", "en", D, "intent", "Replacement card fee", "Replacement card delivery time"),
    ("bank", "en", D, "number", "Is the contactless limit 50 dollars?", "Is the contactless limit 100 dollars?"),
    ("bank", "en", D, "intent", "What is the minimum payment on the Gold card?", "What is the maximum payment on the Gold card?"),
    ("bank", "zh", D, "intent", "怎么激活信用卡", "怎么注销信用卡"),
]  # fmt: skip


def split_of(cached: str, probe: str) -> str:
    """``tune4`` or ``heldout4``, from a seeded hash of the pair's text (declared in the docstring)."""
    return "tune4" if hashlib.sha256(f"{SEED}|{cached}|{probe}".encode()).digest()[0] < 128 else "heldout4"


def rows() -> list[dict[str, object]]:
    out = [
        {
            "id": f"h4-{domain}-{i:03d}", "split": split_of(cached, probe), "seed": SEED, "round": 6,
            "domain": domain, "policy": POLICY[domain], "lang": lang, "label": label, "kind": kind,
            "cached": cached, "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS)
    ]  # fmt: skip
    random.Random(SEED).shuffle(out)
    return out


def main() -> None:
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows()))
    rs = rows()
    for split in ("tune4", "heldout4"):
        part = [r for r in rs if r["split"] == split]
        same = sum(r["label"] == S for r in part)
        print(f"{OUT} {split}: {len(part)} pairs ({same} same, {len(part) - same} different)")


if __name__ == "__main__":
    main()
