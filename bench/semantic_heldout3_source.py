"""A third held-out set for the semantic cache (issue 25, round 5): writes bench/data/semantic_heldout3.jsonl.

    python -m bench.semantic_heldout3_source

Written by hand before any code of round 5 changed and without opening the example policies
(config/examples/semantic-*.yaml): the entity names are the four shops' catalogues as the dev split
names them (phones, orders, cabins, flights, plans, countries, cards); the wordings are how a
customer writes to a help desk (chatty, terse, indirect, with the question word in odd places,
Chinese and mixed zh/en), not any policy's phrases. ``same``: a pair that deserves one answer;
``different``: a near miss that changes one thing (a slot, a number, a unit or period, negation,
time, a direction, or the intent). Every pair is ``split: heldout3``; ``SEED`` only shuffles the
written order. Run once, at the end of the round; rows are not edited after being written.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from bench.semantic_independent_source import POLICY  # the four example policies, one table

SEED = 5125
OUT = Path("bench/data/semantic_heldout3.jsonl")

# (domain, lang, label, kind, cached, probe)
S, D = "same", "different"
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same answer ---
    ("shop", "en", S, "paraphrase", "what does the pixel 8 sell for", "Pixel 8 price"),
    ("shop", "en", S, "paraphrase", "I'm thinking of buying a Galaxy S24, how much would that set me back?", "How much is the Galaxy S24?"),
    ("shop", "en", S, "paraphrase", "Xiaomi 14 - how many grams?", "How much does the Xiaomi 14 weigh?"),
    ("shop", "en", S, "paraphrase", "tell me the battery life of the iPhone 15", "How long does the iPhone 15 battery last?"),
    ("shop", "en", S, "paraphrase", "My order SO2024110807 - any update on where it is?", "Where is my order SO2024110807?"),
    ("shop", "en", S, "paraphrase", "Can you track PO20241002007 for me please", "Where is order PO20241002007?"),
    ("shop", "en", S, "paraphrase", "Mate 60: screen size?", "How big is the Mate 60 screen?"),
    ("shop", "en", S, "paraphrase", "Is the Pixel 8 ok in the rain?", "Is the Pixel 8 water resistant?"),
    ("shop", "en", S, "paraphrase", "how many days do i get to return stuff", "What is the return window?"),
    ("shop", "en", S, "paraphrase", "galaxy s24 cost??", "Galaxy S24 price"),
    ("shop", "en", S, "paraphrase", "What's the going rate for an iPhone 15 Pro?", "iPhone 15 Pro price"),
    ("shop", "en", S, "paraphrase", "Has SO2024122201 left the warehouse yet?", "Has my order SO2024122201 shipped?"),
    ("shop", "zh", S, "paraphrase", "小米14卖多少钱", "小米14价格"),
    ("shop", "zh", S, "paraphrase", "请问一下华为Mate60有多重", "华为Mate60重量"),
    ("shop", "zh", S, "paraphrase", "我买的订单SO2024070701现在到哪里了", "订单SO2024070701物流状态"),
    ("shop", "zh", S, "paraphrase", "三星S24的电池能撑多久", "三星S24续航时间"),
    ("shop", "zh", S, "paraphrase", "买了东西不喜欢能退吗，几天内", "退货期限"),
    ("shop", "mixed", S, "mixed", "Pixel 8 售价多少", "Pixel 8 price"),
    ("shop", "mixed", S, "mixed", "iPhone 15 电池 能用多久", "iPhone 15 battery life"),
    # --- e-commerce, near misses ---
    ("shop", "en", D, "slot", "What does the Pixel 8 sell for?", "What does the Pixel 8 Pro sell for?"),
    ("shop", "en", D, "slot", "How much would a Galaxy S24 set me back?", "How much would a Galaxy S24 Ultra set me back?"),
    ("shop", "en", D, "slot", "Any update on order SO2024110807?", "Any update on order SO2024110870?"),
    ("shop", "en", D, "number", "How much for 2 iPhone 15s?", "How much for 3 iPhone 15s?"),
    ("shop", "en", D, "unit", "How many grams is the Xiaomi 14?", "How many ounces is the Xiaomi 14?"),
    ("shop", "en", D, "negation", "Is the Pixel 8 ok in the rain?", "Why isn't the Pixel 8 ok in the rain?"),
    ("shop", "en", D, "negation", "Can I return a phone I've opened?", "Can I return a phone I haven't opened?"),
    ("shop", "en", D, "time", "Where is my order SO2024122201?", "Where was my order SO2024122201 yesterday?"),
    ("shop", "en", D, "time", "What's the Galaxy S24 price?", "What will the Galaxy S24 price be next month?"),
    ("shop", "en", D, "intent", "Has SO2024122201 left the warehouse yet?", "Can I change the address on SO2024122201?"),
    ("shop", "en", D, "intent", "Tell me the battery life of the iPhone 15", "Tell me the battery health of my iPhone 15"),
    ("shop", "en", D, "intent", "How big is the Mate 60 screen?", "How big is the Mate 60 camera sensor?"),
    ("shop", "en", D, "intent", "How many days do I get to return stuff?", "How many days does a refund take to reach my card?"),
    ("shop", "zh", D, "slot", "小米14卖多少钱", "小米14 Pro卖多少钱"),
    ("shop", "zh", D, "intent", "订单SO2024070701到哪里了", "订单SO2024070701能改地址吗"),
    ("shop", "zh", D, "unit", "华为Mate60有多少克", "华为Mate60有多少斤"),
    ("shop", "zh", D, "negation", "三星S24能无线充电吗", "三星S24为什么不能无线充电"),
    ("shop", "mixed", D, "intent", "Pixel 8 售价多少", "Pixel 8 维修多少钱"),
    ("shop", "mixed", D, "slot", "iPhone 15 电池能用多久", "iPhone 15 Pro 电池能用多久"),
    # --- airline, same answer ---
    ("air", "en", S, "paraphrase", "how many kilos can i check in economy", "Economy checked baggage allowance"),
    ("air", "en", S, "paraphrase", "Flying business next week, what's my luggage limit?", "Business class baggage allowance"),
    ("air", "en", S, "paraphrase", "Is CA981 leaving on schedule?", "Is flight CA981 on time?"),
    ("air", "en", S, "paraphrase", "any delay on MU5101 today", "MU5101 flight status"),
    ("air", "en", S, "paraphrase", "If I cancel my first class ticket do I get a refund?", "First class refund policy"),
    ("air", "en", S, "paraphrase", "I need to move my economy flight to another day, what will that cost me?", "Economy change fee"),
    ("air", "en", S, "paraphrase", "What size bag can I bring onboard in economy?", "Economy carry-on allowance"),
    ("air", "en", S, "paraphrase", "how early can I check in online", "When does online check-in open?"),
    ("air", "en", S, "paraphrase", "premium economy - how much baggage is included?", "Premium economy baggage allowance"),
    ("air", "en", S, "paraphrase", "Is UA857 delayed or on time?", "UA857 status"),
    ("air", "en", S, "paraphrase", "business class ticket refund rules", "Business class refund policy"),
    ("air", "en", S, "paraphrase", "What do you charge to rebook business class?", "Business class change fee"),
    ("air", "zh", S, "paraphrase", "坐经济舱可以托运几公斤", "经济舱托运行李额"),
    ("air", "zh", S, "paraphrase", "MU5101今天会晚点吗", "MU5101航班状态"),
    ("air", "zh", S, "paraphrase", "商务舱的票退了能退多少钱", "商务舱退票政策"),
    ("air", "zh", S, "paraphrase", "经济舱换个日期要交多少钱", "经济舱改签费"),
    ("air", "zh", S, "paraphrase", "网上值机什么时候开始", "在线值机开放时间"),
    ("air", "mixed", S, "mixed", "CA981 准点吗", "CA981 flight status"),
    ("air", "mixed", S, "mixed", "premium economy 能带多少行李", "超级经济舱行李额"),
    # --- airline, near misses ---
    ("air", "en", D, "slot", "How many kilos can I check in economy?", "How many kilos can I check in premium economy?"),
    ("air", "en", D, "slot", "Is CA981 leaving on schedule?", "Is CA985 leaving on schedule?"),
    ("air", "en", D, "slot", "What do you charge to rebook business class?", "What do you charge to rebook first class?"),
    ("air", "en", D, "number", "Can I bring 2 carry-on bags in business?", "Can I bring 3 carry-on bags in business?"),
    ("air", "en", D, "unit", "Economy checked bag limit in kilos", "Economy checked bag limit in pieces"),
    ("air", "en", D, "negation", "If I cancel my first class ticket do I get a refund?", "If I cancel my first class ticket why don't I get a refund?"),
    ("air", "en", D, "negation", "Is the business class fare refundable?", "Is the business class fare nonrefundable?"),
    ("air", "en", D, "time", "Is MU5101 on time today?", "Was MU5101 on time yesterday?"),
    ("air", "en", D, "time", "How early can I check in online?", "How late can I check in online?"),
    ("air", "en", D, "direction", "Economy fare from Beijing to Shanghai", "Economy fare from Shanghai to Beijing"),
    ("air", "en", D, "intent", "What size bag can I bring onboard in economy?", "What size bag can I check in economy?"),
    ("air", "en", D, "intent", "Is UA857 delayed?", "Is UA857 full?"),
    ("air", "en", D, "intent", "Business class ticket refund rules", "Business class upgrade rules"),
    ("air", "en", D, "intent", "When does online check-in open?", "When does boarding start?"),
    ("air", "zh", D, "slot", "坐经济舱可以托运几公斤", "坐商务舱可以托运几公斤"),
    ("air", "zh", D, "intent", "MU5101今天会晚点吗", "MU5101今天在哪个登机口"),
    ("air", "zh", D, "negation", "商务舱的票能退吗", "商务舱的票为什么不能退"),
    ("air", "mixed", D, "slot", "CA981 准点吗", "CA918 准点吗"),
    ("air", "mixed", D, "intent", "economy 改签 多少钱", "economy 升舱 多少钱"),
    # --- mobile plans, same answer ---
    ("tel", "en", S, "paraphrase", "what do you charge for the plus plan each month", "Plus plan monthly price"),
    ("tel", "en", S, "paraphrase", "Max plan - how many GB?", "How much data do I get on the Max plan?"),
    ("tel", "en", S, "paraphrase", "Going to Japan next month, how much is roaming there?", "Japan roaming charges"),
    ("tel", "en", S, "paraphrase", "Does the Lite plan come with 5G?", "Is 5G included in the Lite plan?"),
    ("tel", "en", S, "paraphrase", "I want to bring my number over from another carrier", "How do I port my number?"),
    ("tel", "en", S, "paraphrase", "Steps to get an eSIM working", "How do I activate my eSIM?"),
    ("tel", "en", S, "paraphrase", "what's it cost to ring the UK", "Call rates to the UK"),
    ("tel", "en", S, "paraphrase", "family plan, how much a month?", "Family plan monthly price"),
    ("tel", "en", S, "paraphrase", "I'm out of credit, how do I put more on?", "How do I top up?"),
    ("tel", "en", S, "paraphrase", "Thailand roaming prices please", "How much is roaming in Thailand?"),
    ("tel", "en", S, "paraphrase", "Can I tether on the Plus plan?", "Plus plan hotspot allowance"),
    ("tel", "en", S, "paraphrase", "Monthly cost of the Prepaid plan?", "How much is the Prepaid plan per month?"),
    ("tel", "zh", S, "paraphrase", "Plus套餐一个月要多少钱", "Plus套餐月费"),
    ("tel", "zh", S, "paraphrase", "Max套餐给多少G流量", "Max套餐流量"),
    ("tel", "zh", S, "paraphrase", "我要去韩国，漫游贵不贵", "韩国漫游资费"),
    ("tel", "zh", S, "paraphrase", "想把号码转过来要怎么弄", "携号转网怎么办理"),
    ("tel", "zh", S, "paraphrase", "话费没了怎么充", "怎么充值"),
    ("tel", "mixed", S, "mixed", "Lite plan 支持 5G 吗", "轻享套餐有5G吗"),
    ("tel", "mixed", S, "mixed", "eSIM 怎么开通啊", "eSIM怎么激活"),
    # --- mobile plans, near misses ---
    ("tel", "en", D, "slot", "What do you charge for the Plus plan each month?", "What do you charge for the Max plan each month?"),
    ("tel", "en", D, "slot", "Going to Japan, how much is roaming there?", "Going to Thailand, how much is roaming there?"),
    ("tel", "en", D, "number", "Family plan for 3 lines, how much?", "Family plan for 5 lines, how much?"),
    ("tel", "en", D, "unit", "Plus plan price each month", "Plus plan price each year"),
    ("tel", "en", D, "negation", "Does the Lite plan come with 5G?", "Why doesn't the Lite plan come with 5G?"),
    ("tel", "en", D, "negation", "Roaming in Korea with the travel pass", "Roaming in Korea without the travel pass"),
    ("tel", "en", D, "time", "How much data do I get on the Max plan?", "How much data did I use last month on the Max plan?"),
    ("tel", "en", D, "direction", "What's it cost to ring the UK from here?", "What's it cost to ring here from the UK?"),
    ("tel", "en", D, "intent", "I want to bring my number over from another carrier", "I want to take my number to another carrier"),
    ("tel", "en", D, "intent", "Steps to get an eSIM working", "Steps to switch my eSIM to a new phone"),
    ("tel", "en", D, "intent", "How do I top up?", "How do I get a refund on a top up?"),
    ("tel", "en", D, "intent", "Can I tether on the Plus plan?", "Can I roam on the Plus plan?"),
    ("tel", "en", D, "intent", "Max plan - how many GB?", "Max plan - how many minutes?"),
    ("tel", "zh", D, "slot", "Plus套餐一个月要多少钱", "Max套餐一个月要多少钱"),
    ("tel", "zh", D, "intent", "Max套餐给多少G流量", "Max套餐给多少分钟通话"),
    ("tel", "zh", D, "negation", "家庭套餐能开热点吗", "家庭套餐为什么不能开热点"),
    ("tel", "zh", D, "unit", "日本漫游每天多少钱", "日本漫游每周多少钱"),
    ("tel", "mixed", D, "slot", "Lite plan 支持 5G 吗", "Family plan 支持 5G 吗"),
    ("tel", "mixed", D, "intent", "eSIM 怎么开通", "eSIM 怎么关掉"),
    # --- bank cards, same answer ---
    ("bank", "en", S, "paraphrase", "what's the yearly fee on the gold card", "Gold card annual fee"),
    ("bank", "en", S, "paraphrase", "Platinum card - what interest do you charge?", "Platinum card interest rate"),
    ("bank", "en", S, "paraphrase", "My card is missing, I think I dropped it somewhere", "I lost my card"),
    ("bank", "en", S, "paraphrase", "Just got my new card in the post, how do I start using it?", "How do I activate my card?"),
    ("bank", "en", S, "paraphrase", "Need to stop my card for a bit, how?", "How do I freeze my card?"),
    ("bank", "en", S, "paraphrase", "whats the least i can pay this month", "What is the minimum payment?"),
    ("bank", "en", S, "paraphrase", "How do I get a higher limit on my card?", "How do I increase my credit limit?"),
    ("bank", "en", S, "paraphrase", "Fee for taking cash out on the Classic card?", "Classic card cash advance fee"),
    ("bank", "en", S, "paraphrase", "When's my payment due?", "When is my payment due?"),
    ("bank", "en", S, "paraphrase", "Do I pay extra using the Platinum card overseas?", "Platinum card foreign transaction fee"),
    ("bank", "en", S, "paraphrase", "I forgot my PIN and need a new one", "How do I change my PIN?"),
    ("bank", "en", S, "paraphrase", "How much is the Classic card per year?", "Classic card annual fee"),
    ("bank", "zh", S, "paraphrase", "金卡一年收多少年费", "金卡年费"),
    ("bank", "zh", S, "paraphrase", "卡不见了怎么办", "信用卡挂失"),
    ("bank", "zh", S, "paraphrase", "刚收到的新卡要怎么开卡", "信用卡激活"),
    ("bank", "zh", S, "paraphrase", "这个月最少要还多少", "最低还款额"),
    ("bank", "zh", S, "paraphrase", "想提高信用额度怎么办", "怎么提额"),
    ("bank", "mixed", S, "mixed", "platinum card 利息多少", "白金卡利率"),
    ("bank", "mixed", S, "mixed", "gold card 一年多少钱", "金卡年费"),
    # --- bank cards, near misses ---
    ("bank", "en", D, "slot", "What's the yearly fee on the Gold card?", "What's the yearly fee on the Classic card?"),
    ("bank", "en", D, "slot", "Platinum card - what interest do you charge?", "Gold card - what interest do you charge?"),
    ("bank", "en", D, "number", "Can I take out 200 dollars cash on my card?", "Can I take out 2000 dollars cash on my card?"),
    ("bank", "en", D, "unit", "Gold card annual fee in pounds", "Gold card annual fee in yen"),
    ("bank", "en", D, "negation", "What if I pay the full balance?", "What if I don't pay the full balance?"),
    ("bank", "en", D, "negation", "Does the Gold card charge a foreign fee?", "Why doesn't the Gold card charge a foreign fee?"),
    ("bank", "en", D, "time", "When is my payment due?", "When was my last payment?"),
    ("bank", "en", D, "time", "Gold card annual fee this year", "Gold card annual fee next year"),
    ("bank", "en", D, "direction", "Move money from my card to my current account", "Move money from my current account to my card"),
    ("bank", "en", D, "intent", "Need to stop my card for a bit, how?", "Need to close my card for good, how?"),
    ("bank", "en", D, "intent", "I lost my card", "I lost my card statement"),
    ("bank", "en", D, "intent", "How do I get a higher limit on my card?", "How do I get a lower limit on my card?"),
    ("bank", "en", D, "intent", "Fee for taking cash out on the Classic card?", "Fee for paying late on the Classic card?"),
    ("bank", "zh", D, "slot", "金卡一年收多少年费", "白金卡一年收多少年费"),
    ("bank", "zh", D, "intent", "卡不见了怎么办", "卡被吞了怎么办"),
    ("bank", "zh", D, "intent", "想提高信用额度怎么办", "想降低信用额度怎么办"),
    ("bank", "zh", D, "negation", "白金卡境外消费收手续费吗", "白金卡境外消费为什么不收手续费"),
    ("bank", "mixed", D, "slot", "platinum card 利息多少", "classic card 利息多少"),
    ("bank", "mixed", D, "intent", "gold card 年费多少", "gold card 取现手续费多少"),
]  # fmt: skip


def rows() -> list[dict[str, object]]:
    out = [
        {
            "id": f"h3-{domain}-{i:03d}", "split": "heldout3", "seed": SEED, "round": 5, "domain": domain,
            "policy": POLICY[domain], "lang": lang, "label": label, "kind": kind, "cached": cached,
            "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS)
    ]  # fmt: skip
    random.Random(SEED).shuffle(out)
    return out


def main() -> None:
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows()))
    same = sum(p[2] == S for p in PAIRS)
    print(f"{OUT}: {len(PAIRS)} pairs ({same} same, {len(PAIRS) - same} different)")


if __name__ == "__main__":
    main()
