"""An independent labelled set for the semantic cache (issue 25): writes bench/data/semantic_independent.jsonl.

    python -m bench.semantic_independent_source

Written by hand before the fixes of issue 25, for ``config/examples/semantic-ecommerce.yaml`` and
``config/examples/semantic-airline.yaml`` (a second domain written from docs/semantic-cache.md alone).
``same``: the two questions deserve one answer; ``different``: a near miss (one word, product, id,
quantity, negation, unit, order or date changes the answer). Split by ``SEED``: each pair is drawn
into ``tune`` (60 %) or ``heldout`` (40 %) by one shuffle of this fixed seed; the held-out split is
never looked at while rules change. Pairs are not edited after being written.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

SEED = 25
HELDOUT_SHARE = 0.4
OUT = Path("bench/data/semantic_independent.jsonl")

# (domain, lang, label, kind, cached, probe)
S, D = "same", "different"
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same answer ---
    ("shop", "en", S, "paraphrase", "What's the battery life of the Galaxy S24?", "Galaxy S24 battery life?"),
    ("shop", "en", S, "paraphrase", "How much is the Xiaomi 14?", "What is the price of the Xiaomi 14?"),
    ("shop", "en", S, "paraphrase", "How heavy is the Pixel 8?", "What's the weight of the Google Pixel 8?"),
    ("shop", "en", S, "paraphrase", "What is the screen size of the Mate 60?", "How big is the screen on the Huawei Mate 60?"),
    ("shop", "en", S, "paraphrase", "Is the iPhone 15 Pro waterproof?", "What's the IP rating of the iPhone 15 Pro?"),
    ("shop", "en", S, "paraphrase", "What is the charging speed of the Xiaomi 14?", "Xiaomi 14 charging power"),
    ("shop", "en", S, "paraphrase", "Where is my order SO2024051234?", "Track order SO2024051234"),
    ("shop", "en", S, "paraphrase", "What is the status of order PO1234567890?", "order status PO1234567890"),
    ("shop", "en", S, "paraphrase", "What's your return policy?", "How many days do I have to return an item?"),
    ("shop", "en", S, "filler", "Hi! Quick question: how much is the Galaxy S24?", "Galaxy S24 price"),
    ("shop", "en", S, "case", "iphone 15 price", "IPHONE 15 PRICE???"),
    ("shop", "en", S, "unit_default", "How much does the iPhone 15 weigh in grams?", "iPhone 15 weight"),
    ("shop", "en", S, "unit_default", "What's the battery capacity of the Pixel 8 in mAh?", "Pixel 8 battery capacity"),
    ("shop", "en", S, "contraction", "Where's my order SO20231104001?", "Where is my order SO20231104001?"),
    ("shop", "en", S, "will", "How long will the iPhone 15 battery last?", "iPhone 15 battery life"),
    ("shop", "en", S, "filler", "Can you tell me the price of the Mate 60?", "Mate 60 price please"),
    ("shop", "en", S, "paraphrase", "How big is the Xiaomi 14 display?", "Xiaomi 14 screen size"),
    ("shop", "en", S, "paraphrase", "Is the Galaxy S24 water resistant?", "Galaxy S24 waterproof?"),
    ("shop", "en", S, "spacing", "What is the price of the iPhone 15 Pro?", "how much is the iphone15 pro"),
    ("shop", "en", S, "typo", "Pixle 8 price", "Pixel 8 price"),
    ("shop", "en", S, "paraphrase", "What's the weight of the Galaxy S24?", "How heavy is the Samsung Galaxy S24?"),
    ("shop", "en", S, "paraphrase", "Has order SO2023110400 shipped?", "Shipping status of order SO2023110400"),
    ("shop", "en", S, "unit_default", "What is the Mate 60 battery life in hours?", "How long does the Mate 60 battery last?"),
    ("shop", "en", S, "paraphrase", "xiaomi 14 how many watts", "What's the charging wattage of the Xiaomi 14?"),
    ("shop", "en", S, "filler", "Hello, what is the screen size of the Pixel 8?", "Pixel 8 display size"),
    ("shop", "en", S, "paraphrase", "What is the charging power of the Mate 60?", "Mate 60 fast charging wattage"),
    ("shop", "en", S, "paraphrase", "Galaxy S24 price?", "What's the price of the Samsung Galaxy S24?"),
    ("shop", "en", S, "paraphrase", "Is the Xiaomi 14 splash proof?", "Xiaomi 14 water resistance"),
    ("shop", "zh", S, "paraphrase", "iPhone 15 续航多久？", "苹果15电池能用多久"),
    ("shop", "zh", S, "paraphrase", "小米14多少钱", "小米14的价格是多少"),
    ("shop", "zh", S, "paraphrase", "华为mate60有多重", "华为 Mate 60 重量"),
    ("shop", "zh", S, "paraphrase", "三星S24屏幕多大", "三星s24屏幕尺寸是多少"),
    ("shop", "zh", S, "paraphrase", "订单号SO2024051234到哪了", "帮我查一下订单SO2024051234的物流状态"),
    ("shop", "zh", S, "paraphrase", "谷歌Pixel 8防水吗", "Pixel 8防水等级"),
    ("shop", "zh", S, "paraphrase", "小米14充电功率多少", "小米14几瓦快充"),
    ("shop", "zh", S, "paraphrase", "退货政策是什么", "几天无理由退货"),
    ("shop", "zh", S, "paraphrase", "苹果15 Pro多少钱", "iPhone 15 Pro 售价"),
    ("shop", "zh", S, "paraphrase", "单号PO20231104567发货了吗", "PO20231104567 物流信息"),
    ("shop", "zh", S, "paraphrase", "三星S24电池容量多大", "三星 s24 多少毫安"),
    ("shop", "zh", S, "paraphrase", "请问华为Mate 60续航多久", "华为mate60电池能撑多久"),
    ("shop", "zh", S, "paraphrase", "Pixel 8 多少克", "Pixel 8 有多重"),
    ("shop", "zh", S, "paraphrase", "苹果15 Pro屏幕多大", "iPhone 15 Pro 屏幕尺寸"),
    ("shop", "zh", S, "paraphrase", "订单号SO2024070707物流信息", "运单号SO2024070707到哪了"),
    ("shop", "mixed", S, "paraphrase", "iPhone 15 的 price 是多少", "iPhone 15 price"),
    ("shop", "mixed", S, "paraphrase", "Galaxy S24 battery life 多久", "三星S24续航"),
    ("shop", "mixed", S, "paraphrase", "order SO2024060101 到哪了", "订单号SO2024060101物流状态"),
    ("shop", "mixed", S, "paraphrase", "小米14 screen size", "小米14屏幕多大"),
    ("shop", "mixed", S, "paraphrase", "Mate 60 weight 多少克", "华为mate60多重"),
    # --- e-commerce, near misses ---
    ("shop", "en", D, "filler_content", "How much is the Pixel 8?", "How much is the Pixel 8 battery?"),
    ("shop", "en", D, "filler_content", "How much does the iPhone 15 cost?", "How much does it cost to charge the iPhone 15?"),
    ("shop", "en", D, "entity", "What is the price of the iPhone 15?", "What is the price of the iPhone 15 Pro?"),
    ("shop", "en", D, "entity", "How much is the Galaxy S24?", "How much is the Galaxy S24 Ultra?"),
    ("shop", "en", D, "quantity", "How much is the Xiaomi 14?", "How much are three Xiaomi 14 phones?"),
    ("shop", "en", D, "quantity", "How much is the Pixel 8?", "How much are 2 Pixel 8?"),
    ("shop", "en", D, "id", "Where is my order SO2024051234?", "Where is my order SO2024051235?"),
    ("shop", "en", D, "attribute", "What is the battery life of the iPhone 15?", "What is the battery capacity of the iPhone 15?"),
    ("shop", "en", D, "filler_content", "How long does the Pixel 8 battery last?", "How long does it take to charge the Pixel 8 battery?"),
    ("shop", "en", D, "unit", "What is the battery life of the Mate 60 in hours?", "What is the battery life of the Mate 60 in days?"),
    ("shop", "en", D, "negation", "Is the iPhone 15 waterproof?", "Is the iPhone 15 not waterproof?"),
    ("shop", "en", D, "attribute", "What is the return policy?", "What is the warranty policy?"),
    ("shop", "en", D, "modifier", "What's the return window?", "What's the return window for opened items?"),
    ("shop", "en", D, "modifier", "What is the weight of the Galaxy S24?", "What is the weight of the Galaxy S24 charger?"),
    ("shop", "en", D, "modifier", "What is the screen size of the Pixel 8?", "What is the screen size of the Pixel 8 case?"),
    ("shop", "en", D, "unit", "How much does the iPhone 15 weigh in grams?", "How much does the iPhone 15 weigh in ounces?"),
    ("shop", "en", D, "negation", "Is the Mate 60 refundable?", "Is the Mate 60 non-refundable?"),
    ("shop", "en", D, "modifier", "What's the price of the Xiaomi 14?", "What's the shipping price of the Xiaomi 14?"),
    ("shop", "en", D, "filler_content", "How much is the iPhone 15 battery?", "How much is the iPhone 15?"),
    ("shop", "en", D, "attribute", "Has my order SO2023110400 shipped?", "Has my order SO2023110400 been cancelled?"),
    ("shop", "en", D, "modifier", "Galaxy S24 charging speed", "Galaxy S24 wireless charging speed"),
    ("shop", "en", D, "attribute", "What is the Pixel 8 display size?", "What is the Pixel 8 display resolution?"),
    ("shop", "en", D, "number", "How much is the iPhone 15 with 128GB?", "How much is the iPhone 15 with 256GB?"),
    ("shop", "en", D, "unit", "What is the price of the Mate 60?", "What is the price of the Mate 60 in euros?"),
    ("shop", "en", D, "modifier", "How much is the Xiaomi 14?", "How much is it to repair the Xiaomi 14?"),
    ("shop", "en", D, "modifier", "What is the return policy?", "What is the return policy in Germany?"),
    ("shop", "en", D, "attribute", "Track order SO2024051234", "Cancel order SO2024051234"),
    ("shop", "en", D, "modifier", "How heavy is the Pixel 8?", "How heavy is the Pixel 8 box?"),
    ("shop", "zh", D, "attribute", "订单号SO2024051234到哪了", "订单号SO2024051234取消了吗"),
    ("shop", "zh", D, "unit", "小米14多少克", "小米14多少斤"),
    ("shop", "zh", D, "attribute", "iPhone 15 续航多久", "iPhone 15 充电要多久"),
    ("shop", "zh", D, "attribute", "退货政策是什么", "保修政策是什么"),
    ("shop", "zh", D, "modifier", "小米14多少钱", "小米14电池多少钱"),
    ("shop", "zh", D, "entity", "苹果15多少钱", "苹果15 Pro多少钱"),
    ("shop", "zh", D, "negation", "三星S24防水吗", "三星S24不防水吗"),
    ("shop", "zh", D, "attribute", "华为mate60屏幕多大", "华为mate60屏幕分辨率是多少"),
    ("shop", "zh", D, "id", "订单号SO2024051234发货了吗", "订单号SO2024051243发货了吗"),
    ("shop", "zh", D, "modifier", "Pixel 8多重", "Pixel 8充电器多重"),
    ("shop", "zh", D, "unit", "小米14续航多久", "小米14续航多少天"),
    ("shop", "zh", D, "quantity", "小米14多少钱", "三个小米14多少钱"),
    ("shop", "zh", D, "quantity", "一台iPhone 15多少钱", "两台iPhone 15多少钱"),
    ("shop", "zh", D, "modifier", "三星S24价格", "三星S24维修价格"),
    ("shop", "zh", D, "attribute", "华为mate60电池容量", "华为mate60电池寿命"),
    ("shop", "zh", D, "attribute", "退货期限多少天", "换货期限多少天"),
    ("shop", "mixed", D, "modifier", "iPhone 15 的 price", "iPhone 15 case 的 price"),
    ("shop", "mixed", D, "attribute", "order SO2024060101 到哪了", "order SO2024060101 退款到哪了"),
    ("shop", "mixed", D, "attribute", "Pixel 8 battery life 多久", "Pixel 8 charging time 多久"),
    ("shop", "mixed", D, "modifier", "小米14 weight", "小米14 box weight"),
    # --- airline, same answer ---
    ("air", "en", S, "paraphrase", "What is the baggage allowance for economy?", "Economy class baggage allowance"),
    ("air", "en", S, "paraphrase", "How much checked baggage can I bring in business class?", "Business class checked baggage allowance"),
    ("air", "en", S, "paraphrase", "What's the carry-on limit for economy?", "Economy carry-on allowance"),
    ("air", "en", S, "paraphrase", "What is the status of flight CA981?", "CA981 flight status"),
    ("air", "en", S, "paraphrase", "Is flight MU5101 on time?", "Flight status MU5101"),
    ("air", "en", S, "paraphrase", "When does online check-in open?", "What is the check-in time?"),
    ("air", "en", S, "paraphrase", "What is the refund policy for economy tickets?", "Economy refund policy"),
    ("air", "en", S, "paraphrase", "How much is the change fee for business class?", "Business class change fee"),
    ("air", "en", S, "paraphrase", "first class baggage allowance", "How many bags can I check in first class?"),
    ("air", "en", S, "filler", "Hi, what's the business class baggage allowance?", "business class baggage allowance"),
    ("air", "en", S, "unit_default", "What's the baggage allowance in economy class in kg?", "economy baggage allowance"),
    ("air", "en", S, "contraction", "What's the flight status of CA981?", "What is the flight status of CA981?"),
    ("air", "en", S, "paraphrase", "What's the checked luggage allowance for economy class?", "economy class luggage allowance"),
    ("air", "en", S, "paraphrase", "Business class carry-on allowance", "How much hand luggage can I take in business class?"),
    ("air", "en", S, "paraphrase", "Is UA888 on time?", "UA888 flight status"),
    ("air", "en", S, "filler", "What is the refund policy for first class?", "First class refund policy please"),
    ("air", "en", S, "paraphrase", "Economy change fee?", "How much does it cost to change my flight in economy?"),
    ("air", "zh", S, "paraphrase", "经济舱免费行李额是多少", "经济舱行李额多少"),
    ("air", "zh", S, "paraphrase", "航班CA981状态", "CA981航班动态"),
    ("air", "zh", S, "paraphrase", "商务舱退票政策", "商务舱退票政策是什么"),
    ("air", "zh", S, "paraphrase", "值机时间是什么时候", "什么时候可以值机"),
    ("air", "zh", S, "paraphrase", "头等舱改签费多少", "头等舱改签要多少钱"),
    ("air", "zh", S, "paraphrase", "经济舱手提行李多重", "经济舱随身行李重量限制"),
    ("air", "zh", S, "paraphrase", "商务舱免费行李额", "商务舱托运行李额多少"),
    ("air", "zh", S, "paraphrase", "经济舱改签费", "经济舱改签手续费"),
    ("air", "zh", S, "unit_default", "头等舱行李额多少公斤", "头等舱免费行李额"),
    ("air", "mixed", S, "paraphrase", "MU5101 flight status 是什么", "MU5101航班状态"),
    ("air", "mixed", S, "paraphrase", "economy 行李额", "经济舱行李额"),
    # --- airline, near misses ---
    ("air", "en", D, "entity", "What is the baggage allowance for economy?", "What is the baggage allowance for premium economy?"),
    ("air", "en", D, "entity", "Economy baggage allowance", "Business baggage allowance"),
    ("air", "en", D, "id", "What is the status of flight CA981?", "What is the status of flight CA982?"),
    ("air", "en", D, "negation", "Is the economy ticket refundable?", "Is the economy ticket non-refundable?"),
    ("air", "en", D, "attribute", "Economy refund policy", "Economy change fee"),
    ("air", "en", D, "unit", "Economy baggage allowance in kg", "Economy baggage allowance in pounds"),
    ("air", "en", D, "attribute", "How many bags can I check in economy?", "How many bags can I carry on in economy?"),
    ("air", "en", D, "attribute", "When does check-in open?", "When does check-in close?"),
    ("air", "en", D, "order", "Flights from Beijing to London", "Flights from London to Beijing"),
    ("air", "en", D, "modifier", "What is the change fee for business class?", "What is the change fee for business class on international flights?"),
    ("air", "en", D, "quantity", "Can I bring one bag in economy?", "Can I bring three bags in economy?"),
    ("air", "en", D, "attribute", "Economy carry-on allowance", "Economy checked baggage allowance"),
    ("air", "en", D, "attribute", "Is flight MU5101 delayed?", "Is flight MU5101 cancelled?"),
    ("air", "en", D, "modifier", "Refund policy for business class", "Refund policy for business class award tickets"),
    ("air", "en", D, "modifier", "Check in time for domestic flights", "Check in time for international flights"),
    ("air", "en", D, "modifier", "First class baggage allowance", "First class baggage fee"),
    ("air", "en", D, "quantity", "What is the change fee for economy?", "What is the change fee for economy for 2 passengers?"),
    ("air", "en", D, "date", "UA888 flight status", "UA888 flight status yesterday"),
    ("air", "en", D, "modifier", "What is the baggage allowance for economy?", "What is the baggage allowance for infants in economy?"),
    ("air", "zh", D, "entity", "经济舱行李额", "商务舱行李额"),
    ("air", "zh", D, "id", "航班CA981状态", "航班CA918状态"),
    ("air", "zh", D, "order", "北京到伦敦的航班", "伦敦到北京的航班"),
    ("air", "zh", D, "attribute", "经济舱退票政策", "经济舱改签政策"),
    ("air", "zh", D, "unit", "经济舱托运行李多少公斤", "经济舱托运行李多少件"),
    ("air", "zh", D, "attribute", "值机时间", "登机时间"),
    ("air", "zh", D, "attribute", "CA981延误了吗", "CA981取消了吗"),
    ("air", "zh", D, "negation", "头等舱可以退票吗", "头等舱不可以退票吗"),
    ("air", "zh", D, "attribute", "经济舱手提行李重量", "经济舱手提行李尺寸"),
    ("air", "zh", D, "attribute", "头等舱改签费", "头等舱退票费"),
    ("air", "mixed", D, "entity", "economy 行李额", "premium economy 行李额"),
    ("air", "mixed", D, "attribute", "CA981 flight status", "CA981 flight meal"),
    ("air", "mixed", D, "attribute", "business class 退票政策", "business class 改签费"),
]  # fmt: skip

POLICY = {"shop": "config/examples/semantic-ecommerce.yaml", "air": "config/examples/semantic-airline.yaml"}


def rows() -> list[dict[str, str]]:
    order = list(range(len(PAIRS)))
    random.Random(SEED).shuffle(order)
    heldout = set(order[: round(len(PAIRS) * HELDOUT_SHARE)])
    out = []
    for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS):
        out.append(
            {
                "id": f"{domain}-{i:03d}", "split": "heldout" if i in heldout else "tune", "seed": SEED,
                "domain": domain, "policy": POLICY[domain], "lang": lang, "label": label, "kind": kind,
                "cached": cached, "probe": probe,
            }
        )  # fmt: skip
    return out


def main() -> None:
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows()))
    print(f"{OUT}: {len(PAIRS)} pairs")


if __name__ == "__main__":
    main()
