"""A sixth labelled set for the semantic cache (issue 25, round 8): writes bench/data/semantic_heldout6.jsonl.

    python -m bench.semantic_heldout6_source

Written by hand before any code of round 8 changed, from docs/semantic-cache.md's description of the
four example policies (a phone shop, an airline, a mobile operator, a bank's cards) and their
catalogues, and from ordinary customer phrasing, not from the matching rules' code or the earlier sets'
misses; plus a fifth domain nobody had tuned, a hotel chain (config/examples/semantic-hotel.yaml),
whose policy was written and committed with this set, before any pair of it was run. English, Chinese
and mixed zh/en. ``same``: a pair that deserves one answer; ``different``: a near miss that changes
one thing (a slot, a number, a unit or period, negation, time, a direction, or the intent).
Same-answer pairs are in one language (an answer is written in one). Pairs whose two texts repeat a
pair of an earlier set are dropped by ``rows()`` (a text-only check).

The whole set is ``heldout6``: run once, at the end of round 8, totals only; no rule is changed
looking at it. ``SEED`` shuffles the written order. Rows are not edited after being written.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from bench.semantic_independent_source import POLICY as POLICY4

SEED = 8026
OUT = Path("bench/data/semantic_heldout6.jsonl")
POLICY = {**POLICY4, "hotel": "config/examples/semantic-hotel.yaml"}
EARLIER = sorted(Path("bench/data").glob("semantic_*.jsonl"))

# (domain, lang, label, kind, cached, probe)
S, D = "same", "different"
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same answer ---
    ("shop", "en", S, "frame", "how much are you selling the Pixel 8 for", "Pixel 8 price"),
    ("shop", "en", S, "frame", "What does the Galaxy S24 cost?", "Galaxy S24 price?"),
    ("shop", "en", S, "frame", "price of xiaomi 14 please", "How much is the Xiaomi 14?"),
    ("shop", "en", S, "frame", "What's the price on the iPhone 15 Pro", "iPhone 15 Pro price"),
    ("shop", "en", S, "greeting", "Hello! What is the screen size of the Pixel 8 Pro?", "Pixel 8 Pro screen size"),
    ("shop", "en", S, "greeting", "hey there, how much does the Xiaomi 14 weigh", "Xiaomi 14 weight"),
    ("shop", "en", S, "greeting", "Hi, is the iPhone 15 water resistant?", "iPhone 15 water resistance"),
    ("shop", "en", S, "politeness", "Could you please tell me the battery life of the Galaxy S24?", "Galaxy S24 battery life"),
    ("shop", "en", S, "politeness", "Can you check where my order SO2025010101 is?", "Where is my order SO2025010101?"),
    ("shop", "en", S, "politeness", "I would like to know how fast the Pixel 8 charges", "Pixel 8 charging speed"),
    ("shop", "en", S, "contraction", "What's the Mate 60's battery capacity?", "Mate 60 battery capacity"),
    ("shop", "en", S, "contraction", "Where's my order PO2025020202", "Where is my order PO2025020202?"),
    ("shop", "en", S, "contraction", "How heavy's the Galaxy S24?", "Galaxy S24 weight"),
    ("shop", "en", S, "track", "Has order SO2025030303 been shipped?", "Where is my order SO2025030303?"),
    ("shop", "en", S, "track", "status of order PO2025040404", "Where's order PO2025040404?"),
    ("shop", "en", S, "typo", "Pixel 8 bettery life", "Pixel 8 battery life"),
    ("shop", "en", S, "typo", "how much is the galxy s24", "Galaxy S24 price"),
    ("shop", "en", S, "typo", "Xiaomi 14 wieght", "Xiaomi 14 weight"),
    ("shop", "en", S, "typo", "iPhone 15 screne size", "iPhone 15 screen size"),
    ("shop", "en", S, "word_order", "price, Mate 60?", "Mate 60 price"),
    ("shop", "en", S, "word_order", "screen size of the Galaxy S24", "Galaxy S24 screen size"),
    ("shop", "en", S, "filler", "So, like, how long does the iPhone 15 battery last?", "iPhone 15 battery life"),
    ("shop", "en", S, "filler", "Quick question: Xiaomi 14 battery capacity?", "Xiaomi 14 battery capacity"),
    ("shop", "en", S, "synonym", "How big is the Pixel 8 display?", "Pixel 8 screen size"),
    ("shop", "en", S, "synonym", "What's the mAh of the Mate 60 battery?", "Mate 60 battery capacity"),
    ("shop", "en", S, "synonym", "Is the Galaxy S24 splash proof?", "Galaxy S24 water resistance"),
    ("shop", "en", S, "synonym", "How many days do I have to return an item?", "What is your return window?"),
    ("shop", "en", S, "synonym", "What's the max charging wattage of the iPhone 15?", "iPhone 15 charging power"),
    ("shop", "en", S, "case", "PIXEL 8 PRO WEIGHT", "pixel 8 pro weight"),
    ("shop", "en", S, "punctuation", "galaxy s24 price???", "Galaxy S24 price"),
    ("shop", "zh", S, "frame", "小米14多少钱啊", "小米14价格"),
    ("shop", "zh", S, "frame", "三星S24卖多少钱", "三星S24多少钱"),
    ("shop", "zh", S, "greeting", "您好，华为Mate60有多重", "华为Mate60重量"),
    ("shop", "zh", S, "politeness", "麻烦查一下订单SO2025050505到哪了", "订单SO2025050505到哪了"),
    ("shop", "zh", S, "synonym", "苹果15屏幕多大", "苹果15屏幕尺寸"),
    ("shop", "zh", S, "synonym", "小米14电池多大容量", "小米14电池容量"),
    ("shop", "zh", S, "synonym", "华为Mate60充电多快", "华为Mate60充电速度"),
    ("shop", "zh", S, "filler", "那个，三星S24防水吗", "三星S24防水吗"),
    ("shop", "zh", S, "return", "退货政策是什么", "怎么退货"),
    ("shop", "mixed", S, "mixed", "Pixel 8 电池能用多久", "Pixel 8 续航多久"),
    ("shop", "mixed", S, "mixed", "iPhone 15 多重", "iPhone 15 重量"),
    # --- e-commerce, near misses ---
    ("shop", "en", D, "slot", "How much is the iPhone 15?", "How much is the iPhone 15 Pro?"),
    ("shop", "en", D, "slot", "Pixel 8 Pro battery life", "Pixel 8 battery life"),
    ("shop", "en", D, "slot", "Where is my order SO2025060606?", "Where is my order SO2025060607?"),
    ("shop", "en", D, "slot", "Galaxy S24 weight", "Mate 60 weight"),
    ("shop", "en", D, "slot", "Xiaomi 14 screen size", "Xiaomi 14 Pro screen size"),
    ("shop", "en", D, "intent", "Galaxy S24 battery life", "Galaxy S24 battery capacity"),
    ("shop", "en", D, "intent", "iPhone 15 weight", "iPhone 15 screen size"),
    ("shop", "en", D, "intent", "How fast does the Pixel 8 charge?", "How long does the Pixel 8 battery last?"),
    ("shop", "en", D, "intent", "Where is my order PO2025070707?", "Can I cancel my order PO2025070707?"),
    ("shop", "en", D, "intent", "What is your return policy?", "What is your warranty policy?"),
    ("shop", "en", D, "intent", "Is the Mate 60 waterproof?", "Is the Mate 60 dustproof?"),
    ("shop", "en", D, "intent", "Xiaomi 14 price", "Xiaomi 14 price drop"),
    ("shop", "en", D, "number", "Is the Galaxy S24 waterproof to 1.5 metres?", "Is the Galaxy S24 waterproof to 6 metres?"),
    ("shop", "en", D, "number", "How much for two iPhone 15s?", "How much for one iPhone 15?"),
    ("shop", "en", D, "unit", "Pixel 8 weight in grams", "Pixel 8 weight in ounces"),
    ("shop", "en", D, "unit", "Mate 60 screen size in inches", "Mate 60 screen size in centimetres"),
    ("shop", "en", D, "negation", "Is the iPhone 15 waterproof?", "Why is the iPhone 15 not waterproof?"),
    ("shop", "en", D, "negation", "Which phones support fast charging?", "Which phones don't support fast charging?"),
    ("shop", "en", D, "time", "Galaxy S24 price", "Galaxy S24 price on Black Friday"),
    ("shop", "en", D, "time", "Where is my order SO2025080808?", "Where was my order SO2025080808 yesterday?"),
    ("shop", "en", D, "intent", "How much is the Pixel 8 case?", "How much is the Pixel 8?"),
    ("shop", "en", D, "intent", "How much does it cost to repair the Xiaomi 14 screen?", "Xiaomi 14 price"),
    ("shop", "zh", D, "slot", "华为Mate60多少钱", "华为Mate60 Pro多少钱"),
    ("shop", "zh", D, "slot", "小米14重量", "苹果15重量"),
    ("shop", "zh", D, "intent", "三星S24续航", "三星S24充电速度"),
    ("shop", "zh", D, "intent", "订单SO2025090909到哪了", "订单SO2025090909能退款吗"),
    ("shop", "zh", D, "intent", "苹果15屏幕尺寸", "苹果15屏幕分辨率"),
    ("shop", "zh", D, "negation", "小米14防水吗", "小米14为什么不防水"),
    ("shop", "zh", D, "time", "谷歌Pixel 8价格", "谷歌Pixel 8明年价格"),
    ("shop", "zh", D, "unit", "华为Mate60重量多少克", "华为Mate60重量多少斤"),
    ("shop", "mixed", D, "slot", "iPhone 15 多少钱", "iPhone 15 Pro 多少钱"),
    ("shop", "mixed", D, "intent", "Galaxy S24 电池容量", "Galaxy S24 屏幕尺寸"),
    ("shop", "mixed", D, "slot", "订单 SO2025101010 到哪了", "订单 PO2025101010 到哪了"),
    # --- airline, same answer ---
    ("air", "en", S, "frame", "What is the checked baggage allowance in economy?", "economy baggage allowance"),
    ("air", "en", S, "frame", "How many bags can I check in business class?", "Business class checked baggage allowance"),
    ("air", "en", S, "greeting", "Hi, is flight CA1234 on time?", "CA1234 flight status"),
    ("air", "en", S, "greeting", "hello, what's the carry on allowance for premium economy", "premium economy carry on allowance"),
    ("air", "en", S, "politeness", "Could you tell me the refund policy for economy tickets?", "Economy refund policy"),
    ("air", "en", S, "politeness", "Please let me know the change fee in business class", "Business class change fee"),
    ("air", "en", S, "contraction", "What's the status of MU5678?", "MU5678 flight status"),
    ("air", "en", S, "synonym", "Is UA889 delayed?", "Is UA889 on time?"),
    ("air", "en", S, "synonym", "How much hand luggage can I take in first class?", "First class carry on allowance"),
    ("air", "en", S, "synonym", "When does online check-in open?", "How early can I check in online?"),
    ("air", "en", S, "typo", "economy bagage allowance", "economy baggage allowance"),
    ("air", "en", S, "case", "BA39 FLIGHT STATUS", "ba39 flight status"),
    ("air", "en", S, "space", "Is MU 5101 delayed?", "Is MU5101 delayed?"),
    ("air", "zh", S, "frame", "经济舱可以托运多少行李", "经济舱免费行李额"),
    ("air", "zh", S, "greeting", "你好，CA981航班延误了吗", "CA981晚点了吗"),
    ("air", "zh", S, "synonym", "商务舱改签要多少钱", "商务舱改签费"),
    ("air", "zh", S, "synonym", "头等舱手提行李限额", "头等舱随身行李可以带多重"),
    ("air", "zh", S, "politeness", "请问经济舱退票政策", "经济舱退票规定"),
    ("air", "mixed", S, "mixed", "CZ3101 延误了吗", "CZ3101 晚点了吗"),
    # --- airline, near misses ---
    ("air", "en", D, "slot", "Economy baggage allowance", "Premium economy baggage allowance"),
    ("air", "en", D, "slot", "Is CA1234 on time?", "Is CA1235 on time?"),
    ("air", "en", D, "slot", "Business class change fee", "First class change fee"),
    ("air", "en", D, "intent", "Economy refund policy", "Economy change fee"),
    ("air", "en", D, "intent", "Business class carry on allowance", "Business class checked baggage allowance"),
    ("air", "en", D, "intent", "Is MU5678 delayed?", "Is MU5678 cancelled?"),
    ("air", "en", D, "number", "Can I check 2 bags in economy?", "Can I check 3 bags in economy?"),
    ("air", "en", D, "unit", "economy baggage allowance in kg", "economy baggage allowance in pounds"),
    ("air", "en", D, "negation", "Is the economy ticket refundable?", "Is the economy ticket non-refundable?"),
    ("air", "en", D, "time", "When does check-in open?", "When does check-in close?"),
    ("air", "en", D, "direction", "Is there a flight from Beijing to London?", "Is there a flight from London to Beijing?"),
    ("air", "en", D, "time", "Was UA889 delayed yesterday?", "Is UA889 delayed today?"),
    ("air", "zh", D, "slot", "经济舱行李额", "商务舱行李额"),
    ("air", "zh", D, "intent", "商务舱退票费", "商务舱改签费"),
    ("air", "zh", D, "slot", "CA981晚点了吗", "CA982晚点了吗"),
    ("air", "zh", D, "unit", "托运行李多少公斤", "托运行李多少磅"),
    ("air", "zh", D, "negation", "头等舱能退票吗", "头等舱为什么不能退票"),
    ("air", "mixed", D, "slot", "economy 行李额", "business 行李额"),
    # --- mobile plans, same answer ---
    ("tel", "en", S, "frame", "How much is the Plus plan a month?", "Plus plan monthly price"),
    ("tel", "en", S, "frame", "How much data does the Max plan come with?", "Max plan data allowance"),
    ("tel", "en", S, "greeting", "Hi! Does the Lite plan support 5G?", "Lite plan 5G"),
    ("tel", "en", S, "greeting", "hello, what are the roaming charges in Japan", "Japan roaming rates"),
    ("tel", "en", S, "politeness", "Could you tell me how to activate my eSIM?", "How do I activate my eSIM?"),
    ("tel", "en", S, "politeness", "Please tell me the call rate to the UK", "UK call rate"),
    ("tel", "en", S, "contraction", "What's the hotspot allowance on the Family plan?", "Family plan hotspot allowance"),
    ("tel", "en", S, "synonym", "How do I add credit to my phone?", "How do I top up?"),
    ("tel", "en", S, "synonym", "Can I keep my number if I switch to you?", "How do I port my number?"),
    ("tel", "en", S, "synonym", "How many gigs on the Prepaid plan?", "Prepaid plan data allowance"),
    ("tel", "en", S, "synonym", "Can I tether on the Plus plan?", "Plus plan hotspot"),
    ("tel", "en", S, "typo", "Max plan roming in Korea", "Max plan roaming in Korea"),
    ("tel", "en", S, "case", "LITE PLAN PRICE", "lite plan price"),
    ("tel", "zh", S, "frame", "plus套餐每月多少钱", "plus套餐月费"),
    ("tel", "zh", S, "greeting", "你好，去日本漫游怎么收费", "日本漫游资费"),
    ("tel", "zh", S, "synonym", "怎么充话费", "怎么充值"),
    ("tel", "zh", S, "synonym", "家庭套餐有多少流量", "家庭套餐包含多少流量"),
    ("tel", "zh", S, "synonym", "esim怎么开通", "esim怎么激活"),
    ("tel", "mixed", S, "mixed", "Max plan 支持5G吗", "Max plan 能用5G吗"),
    # --- mobile plans, near misses ---
    ("tel", "en", D, "slot", "Lite plan price", "Plus plan price"),
    ("tel", "en", D, "slot", "Roaming rates in Japan", "Roaming rates in Korea"),
    ("tel", "en", D, "slot", "Call rate to the USA", "Call rate to Thailand"),
    ("tel", "en", D, "intent", "Max plan data allowance", "Max plan hotspot allowance"),
    ("tel", "en", D, "intent", "How do I activate my eSIM?", "How do I deactivate my eSIM?"),
    ("tel", "en", D, "intent", "How do I top up?", "How do I get a refund on a top up?"),
    ("tel", "en", D, "period", "Plus plan price per month", "Plus plan price per year"),
    ("tel", "en", D, "number", "Can I get 20 GB on the Lite plan?", "Can I get 50 GB on the Lite plan?"),
    ("tel", "en", D, "negation", "Does the Family plan support 5G?", "Why doesn't the Family plan support 5G?"),
    ("tel", "en", D, "time", "What is my data balance?", "What was my data balance last week?"),
    ("tel", "en", D, "intent", "Plus plan price", "Plus plan cancellation fee"),
    ("tel", "zh", D, "slot", "lite套餐月费", "max套餐月费"),
    ("tel", "zh", D, "slot", "韩国漫游资费", "泰国漫游资费"),
    ("tel", "zh", D, "intent", "家庭套餐流量", "家庭套餐热点"),
    ("tel", "zh", D, "period", "plus套餐每月多少钱", "plus套餐每年多少钱"),
    ("tel", "zh", D, "negation", "预付费卡支持5G吗", "预付费卡为什么不支持5G"),
    ("tel", "mixed", D, "slot", "Lite plan 流量", "Plus plan 流量"),
    ("tel", "mixed", D, "intent", "esim 怎么激活", "esim 怎么注销"),
    # --- bank cards, same answer ---
    ("bank", "en", S, "frame", "What's the annual fee on the Gold card?", "Gold card annual fee"),
    ("bank", "en", S, "frame", "What interest rate does the Platinum card charge?", "Platinum card interest rate"),
    ("bank", "en", S, "greeting", "Hi, how do I activate my new card?", "How do I activate my card?"),
    ("bank", "en", S, "greeting", "Hello, I lost my card, what should I do?", "I lost my card"),
    ("bank", "en", S, "politeness", "Could you tell me how to freeze my card?", "How do I freeze my card?"),
    ("bank", "en", S, "politeness", "Please tell me when my payment is due", "When is my payment due?"),
    ("bank", "en", S, "contraction", "What's the cash advance fee on the Classic card?", "Classic card cash advance fee"),
    ("bank", "en", S, "synonym", "How do I get a higher credit limit?", "How do I increase my credit limit?"),
    ("bank", "en", S, "synonym", "What's the lowest amount I can pay this month?", "What is the minimum payment?"),
    ("bank", "en", S, "synonym", "How do I lock my card?", "How do I freeze my card?"),
    ("bank", "en", S, "synonym", "Does the Platinum card charge a foreign transaction fee?", "Platinum card foreign transaction fee"),
    ("bank", "en", S, "typo", "Gold card anual fee", "Gold card annual fee"),
    ("bank", "en", S, "case", "CLASSIC CARD INTEREST RATE", "classic card interest rate"),
    ("bank", "zh", S, "frame", "金卡年费多少", "金卡年费是多少"),
    ("bank", "zh", S, "greeting", "你好，信用卡丢了怎么办", "信用卡挂失"),
    ("bank", "zh", S, "synonym", "怎么提额", "怎么提高信用额度"),
    ("bank", "zh", S, "synonym", "白金卡免息期多少天", "白金卡免息期"),
    ("bank", "zh", S, "politeness", "请问怎么修改密码", "修改密码"),
    ("bank", "mixed", S, "mixed", "Gold card 年费多少", "Gold card 年费是多少"),
    # --- bank cards, near misses ---
    ("bank", "en", D, "slot", "Gold card annual fee", "Platinum card annual fee"),
    ("bank", "en", D, "slot", "Classic card interest rate", "Gold card interest rate"),
    ("bank", "en", D, "intent", "How do I freeze my card?", "How do I unfreeze my card?"),
    ("bank", "en", D, "intent", "How do I activate my card?", "How do I cancel my card?"),
    ("bank", "en", D, "intent", "Platinum card annual fee", "Platinum card cash advance fee"),
    ("bank", "en", D, "intent", "How do I increase my credit limit?", "How do I decrease my credit limit?"),
    ("bank", "en", D, "currency", "Gold card annual fee in dollars", "Gold card annual fee in euros"),
    ("bank", "en", D, "number", "Can I withdraw 500 dollars abroad?", "Can I withdraw 5000 dollars abroad?"),
    ("bank", "en", D, "negation", "Does the Gold card charge a foreign transaction fee?", "Why doesn't the Gold card charge a foreign transaction fee?"),
    ("bank", "en", D, "time", "When is my payment due?", "When was my last payment due?"),
    ("bank", "en", D, "intent", "minimum payment", "minimum payment penalty"),
    ("bank", "zh", D, "slot", "普卡年费", "金卡年费"),
    ("bank", "zh", D, "intent", "怎么冻结信用卡", "怎么解冻信用卡"),
    ("bank", "zh", D, "intent", "白金卡利率", "白金卡取现手续费"),
    ("bank", "zh", D, "negation", "白金卡有年费吗", "白金卡为什么没有年费"),
    ("bank", "zh", D, "intent", "怎么提高额度", "怎么降低额度"),
    ("bank", "mixed", D, "slot", "Classic card 利率", "Platinum card 利率"),
    # --- hotel (a new domain, policy written with this set), same answer ---
    ("hotel", "en", S, "frame", "How much is a deluxe room in Shanghai per night?", "Shanghai deluxe room rate per night"),
    ("hotel", "en", S, "frame", "What does a suite in Tokyo cost a night?", "Tokyo suite price per night"),
    ("hotel", "en", S, "greeting", "Hi! What time is check-in?", "Check-in time"),
    ("hotel", "en", S, "greeting", "hello, when do I have to check out", "What is the check-out time?"),
    ("hotel", "en", S, "politeness", "Could you tell me if breakfast is included with the standard room?", "Does the standard room include breakfast?"),
    ("hotel", "en", S, "politeness", "Please tell me your cancellation policy", "What is the cancellation policy?"),
    ("hotel", "en", S, "contraction", "What's the parking fee at the Beijing hotel?", "Beijing parking fee"),
    ("hotel", "en", S, "contraction", "Is my booking HB20250101 confirmed? It's urgent", "Is my booking HB20250101 confirmed?"),
    ("hotel", "en", S, "synonym", "Can I bring my dog to the Tokyo hotel?", "Is the Tokyo hotel pet friendly?"),
    ("hotel", "en", S, "synonym", "Do you have an airport shuttle in Shanghai?", "Shanghai airport transfer"),
    ("hotel", "en", S, "synonym", "Is there free cancellation?", "Can I cancel my booking?"),
    ("hotel", "en", S, "synonym", "status of my booking HB20250202", "Is booking HB20250202 confirmed?"),
    ("hotel", "en", S, "typo", "Beijing standard room prcie per night", "Beijing standard room price per night"),
    ("hotel", "en", S, "case", "TOKYO PARKING FEE", "tokyo parking fee"),
    ("hotel", "en", S, "word_order", "family room in Beijing, price per night?", "Beijing family room price per night"),
    ("hotel", "en", S, "filler", "Just wondering, is breakfast included in the suite?", "Does the suite include breakfast?"),
    ("hotel", "zh", S, "frame", "上海豪华间一晚多少钱", "上海豪华间每晚价格"),
    ("hotel", "zh", S, "greeting", "你好，几点可以入住", "入住时间"),
    ("hotel", "zh", S, "synonym", "几点前退房", "退房时间"),
    ("hotel", "zh", S, "synonym", "北京酒店可以带宠物吗", "北京酒店宠物政策"),
    ("hotel", "zh", S, "synonym", "标准间含早吗", "标准间包早餐吗"),
    ("hotel", "mixed", S, "mixed", "Tokyo 停车费多少", "Tokyo 停车费是多少"),
    # --- hotel, near misses ---
    ("hotel", "en", D, "slot", "Shanghai deluxe room price per night", "Shanghai standard room price per night"),
    ("hotel", "en", D, "slot", "Beijing suite price per night", "Tokyo suite price per night"),
    ("hotel", "en", D, "slot", "Is my booking HB20250303 confirmed?", "Is my booking HB20250304 confirmed?"),
    ("hotel", "en", D, "slot", "Shanghai parking fee", "Beijing parking fee"),
    ("hotel", "en", D, "intent", "What is the check-in time?", "What is the check-out time?"),
    ("hotel", "en", D, "intent", "Does the deluxe room include breakfast?", "Does the deluxe room include dinner?"),
    ("hotel", "en", D, "intent", "Tokyo airport shuttle", "Tokyo airport shuttle price"),
    ("hotel", "en", D, "intent", "Can I bring my dog to the Beijing hotel?", "Can I bring my dog to the Beijing hotel restaurant?"),
    ("hotel", "en", D, "period", "Tokyo family room price per night", "Tokyo family room price per week"),
    ("hotel", "en", D, "number", "Price for 2 nights in a Shanghai suite", "Price for 5 nights in a Shanghai suite"),
    ("hotel", "en", D, "negation", "Is breakfast included in the standard room?", "Why is breakfast not included in the standard room?"),
    ("hotel", "en", D, "time", "What is the check-in time?", "What was the check-in time last year?"),
    ("hotel", "en", D, "intent", "What is the cancellation policy?", "What is the late cancellation fee?"),
    ("hotel", "en", D, "intent", "Is there parking at the Tokyo hotel?", "Is there EV charging at the Tokyo hotel?"),
    ("hotel", "zh", D, "slot", "上海标准间一晚多少钱", "上海套房一晚多少钱"),
    ("hotel", "zh", D, "slot", "北京停车费", "东京停车费"),
    ("hotel", "zh", D, "intent", "入住时间", "退房时间"),
    ("hotel", "zh", D, "negation", "家庭房含早餐吗", "家庭房为什么不含早餐"),
    ("hotel", "zh", D, "intent", "上海机场接送", "上海机场接送多少钱"),
    ("hotel", "zh", D, "period", "东京豪华间每晚价格", "东京豪华间每周价格"),
    ("hotel", "mixed", D, "slot", "Shanghai 套房 一晚多少钱", "Beijing 套房 一晚多少钱"),
    ("hotel", "mixed", D, "intent", "booking HB20250505 确认了吗", "booking HB20250505 可以取消吗"),
    # --- more near misses, every domain (written with the rest, before any run) ---
    ("shop", "en", D, "slot", "hey, how much is the Pixel 8 these days?", "hey, how much is the Pixel 8 Pro these days?"),
    ("shop", "en", D, "slot", "Can you tell me where order SO2025111111 is?", "Can you tell me where order SO2025111112 is?"),
    ("shop", "en", D, "intent", "How long does the Galaxy S24 battery last on a charge?", "How long does the Galaxy S24 take to charge?"),
    ("shop", "en", D, "intent", "What's the return window for the Mate 60?", "What's the warranty period for the Mate 60?"),
    ("shop", "en", D, "intent", "Is the iPhone 15 Pro in stock?", "How much is the iPhone 15 Pro?"),
    ("shop", "en", D, "number", "I want to buy 3 Xiaomi 14s, how much?", "I want to buy 1 Xiaomi 14, how much?"),
    ("shop", "en", D, "unit", "How many watts does the Pixel 8 charge at?", "How many minutes does the Pixel 8 take to charge?"),
    ("shop", "en", D, "negation", "Does the Mate 60 come with a charger?", "Why doesn't the Mate 60 come with a charger?"),
    ("shop", "en", D, "time", "How much was the iPhone 15 at launch?", "How much is the iPhone 15 now?"),
    ("shop", "zh", D, "slot", "请问小米14多少钱", "请问小米14 Pro多少钱"),
    ("shop", "zh", D, "intent", "三星S24有多重", "三星S24有多厚"),
    ("shop", "zh", D, "intent", "订单PO2025121212发货了吗", "订单PO2025121212怎么退货"),
    ("shop", "mixed", D, "negation", "Pixel 8 防水吗", "Pixel 8 为什么不防水"),
    ("air", "en", D, "slot", "How many bags can I check on an economy ticket?", "How many bags can I check on a business class ticket?"),
    ("air", "en", D, "slot", "hi, is BA38 running late?", "hi, is BA39 running late?"),
    ("air", "en", D, "intent", "What's the fee to change my economy flight?", "What's the fee to cancel my economy flight?"),
    ("air", "en", D, "intent", "How much carry on can I bring in first class?", "How many pets can I bring in first class?"),
    ("air", "en", D, "number", "Can I bring a 7 kg cabin bag in economy?", "Can I bring a 10 kg cabin bag in economy?"),
    ("air", "en", D, "negation", "Can I get a refund on a business class ticket?", "Why can't I get a refund on a business class ticket?"),
    ("air", "en", D, "time", "When can I check in online for tomorrow's flight?", "When could I check in online last year?"),
    ("air", "zh", D, "slot", "超级经济舱可以托运多少行李", "头等舱可以托运多少行李"),
    ("air", "zh", D, "intent", "MU5101延误了吗", "MU5101取消了吗"),
    ("air", "zh", D, "number", "经济舱能托运两件行李吗", "经济舱能托运三件行李吗"),
    ("air", "mixed", D, "intent", "business class 改签费", "business class 退票费"),
    ("tel", "en", D, "slot", "How much does the Family plan cost each month?", "How much does the Max plan cost each month?"),
    ("tel", "en", D, "slot", "what do you charge for roaming in Thailand", "what do you charge for roaming in the UK"),
    ("tel", "en", D, "intent", "Does the Lite plan include a hotspot?", "Does the Lite plan include international calls?"),
    ("tel", "en", D, "intent", "How do I port my number to you?", "How do I port my number away from you?"),
    ("tel", "en", D, "number", "Is there a plan with 100 GB of data?", "Is there a plan with 10 GB of data?"),
    ("tel", "en", D, "negation", "Can I use 5G on the Prepaid plan?", "Why can't I use 5G on the Prepaid plan?"),
    ("tel", "en", D, "period", "How much roaming data do I get per day in Japan?", "How much roaming data do I get per week in Japan?"),
    ("tel", "zh", D, "slot", "打电话到美国多少钱一分钟", "打电话到英国多少钱一分钟"),
    ("tel", "zh", D, "intent", "怎么激活esim", "怎么把esim换回实体卡"),
    ("tel", "mixed", D, "slot", "Japan 漫游多少钱", "Korea 漫游多少钱"),
    ("bank", "en", D, "slot", "How much is the yearly fee for the Classic card?", "How much is the yearly fee for the Platinum card?"),
    ("bank", "en", D, "intent", "I lost my card, how do I report it?", "I found my card, how do I reactivate it?"),
    ("bank", "en", D, "intent", "What's the interest rate on the Gold card?", "What's the penalty rate on the Gold card?"),
    ("bank", "en", D, "number", "Is there a fee to withdraw 200 euros at an ATM abroad?", "Is there a fee to withdraw 2000 euros at an ATM abroad?"),
    ("bank", "en", D, "negation", "Does the Classic card have an interest free period?", "Why doesn't the Classic card have an interest free period?"),
    ("bank", "en", D, "time", "What is the Platinum card annual fee this year?", "What was the Platinum card annual fee in 2020?"),
    ("bank", "zh", D, "slot", "金卡取现手续费", "白金卡取现手续费"),
    ("bank", "zh", D, "intent", "信用卡怎么激活", "信用卡怎么注销"),
    ("bank", "mixed", D, "intent", "Platinum card 年费", "Platinum card 利率"),
    ("hotel", "en", D, "slot", "Is there parking at the Shanghai hotel?", "Is there parking at the Tokyo hotel?"),
    ("hotel", "en", D, "intent", "What time can I check in at the Beijing hotel?", "What time is breakfast at the Beijing hotel?"),
    ("hotel", "zh", D, "slot", "北京家庭房一晚多少钱", "北京标准间一晚多少钱"),
    ("hotel", "zh", D, "intent", "东京酒店可以带宠物吗", "东京酒店可以抽烟吗"),
]  # fmt: skip


def _earlier() -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    for path in EARLIER:
        if path == OUT:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line:
                r = orjson.loads(line)
                seen.add((r["cached"].lower(), r["probe"].lower()))
                seen.add((r["probe"].lower(), r["cached"].lower()))
    return seen


def rows() -> list[dict[str, str]]:
    seen = _earlier()
    out = [
        {
            "id": f"h6-{domain}-{i:03d}", "split": "heldout6", "seed": SEED, "round": 8,
            "domain": domain, "policy": POLICY[domain], "lang": lang, "label": label, "kind": kind,
            "cached": cached, "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS)
        if (cached.lower(), probe.lower()) not in seen
    ]  # fmt: skip
    random.Random(SEED).shuffle(out)
    return out


def main() -> None:
    rs = rows()
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rs))
    same = sum(r["label"] == S for r in rs)
    print(
        f"{OUT} heldout6: {len(rs)} pairs ({same} same, {len(rs) - same} different), {len(PAIRS) - len(rs)} dropped"
    )


if __name__ == "__main__":
    main()
