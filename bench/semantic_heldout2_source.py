"""A second held-out set for the semantic cache (issue 25, fourth pass): writes bench/data/semantic_heldout2.jsonl.

    python -m bench.semantic_heldout2_source

The first held-out split of bench/data/semantic_independent.jsonl was spent by the third pass (run
once, fingerprints 60/86 = 0.70). This set was written by hand before any rule of the fourth pass
changed, from how customers write to a shop, an airline, a mobile operator and a card issuer (short,
lower case, typos, greetings, "pls", Chinese 请问/麻烦/怎么还没, half-English half-Chinese), without
reading the example policies. ``same``: one answer fits both; ``different``: a near miss where one
product, slot value, id, quantity, negation, unit, order or attribute changes the answer.

Every row is ``split: heldout2``: the set is run once at the end of the pass (totals only), never
looked at per row while rules change. Pairs are not edited after being written.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.semantic_independent_source import POLICY  # the four example policies, one table

OUT = Path("bench/data/semantic_heldout2.jsonl")
SPLIT = "heldout2"

S, D = "same", "different"
# (domain, lang, label, kind, cached, probe)
PAIRS: list[tuple[str, str, str, str, str, str]] = [
    # --- e-commerce, same ---
    ("shop", "en", S, "paraphrase", "how much does the galaxy s24 cost", "Galaxy S24 price?"),
    ("shop", "en", S, "filler", "hey there, whats the price of the pixel 8", "Pixel 8 price"),
    ("shop", "en", S, "paraphrase", "how long does the xiaomi 14 battery last on a charge", "Xiaomi 14 battery life"),
    ("shop", "en", S, "typo", "iphone 15 wieght", "iPhone 15 weight"),
    ("shop", "en", S, "paraphrase", "my order SO2024090912 hasn't arrived yet, where is it", "Where is order SO2024090912?"),
    ("shop", "en", S, "filler", "pls tell me the screen size of the mate 60", "Mate 60 screen size"),
    ("shop", "en", S, "paraphrase", "can i take the galaxy s24 swimming", "Is the Galaxy S24 waterproof?"),
    ("shop", "en", S, "contraction", "what's the pixel 8's weight", "What is the weight of the Pixel 8?"),
    ("shop", "en", S, "paraphrase", "how fast does the mate 60 charge", "Mate 60 charging speed"),
    ("shop", "en", S, "filler", "thanks in advance - how heavy is the xiaomi 14?", "Xiaomi 14 weight"),
    ("shop", "zh", S, "paraphrase", "我的订单SO2024090912怎么还没到", "订单SO2024090912到哪了"),
    ("shop", "zh", S, "filler", "你好，请问小米14多少钱", "小米14价格"),
    ("shop", "zh", S, "paraphrase", "三星S24能用多久电", "三星S24续航"),
    ("shop", "zh", S, "paraphrase", "麻烦问下华为mate60屏幕多大", "华为Mate 60屏幕尺寸"),
    ("shop", "zh", S, "paraphrase", "苹果15重不重", "iPhone 15 重量"),
    ("shop", "zh", S, "paraphrase", "Pixel 8 防不防水", "Pixel 8 防水吗"),
    ("shop", "zh", S, "paraphrase", "退货要怎么退", "如何退货"),
    ("shop", "zh", S, "paraphrase", "订单PO2024111111怎么还没发货", "PO2024111111发货了吗"),
    ("shop", "mixed", S, "lang_mix", "galaxy s24 多少钱啊", "Galaxy S24 price"),
    ("shop", "mixed", S, "lang_mix", "小米14 battery life", "小米14续航多久"),
    ("shop", "mixed", S, "lang_mix", "请问 pixel 8 weight 是多少", "Pixel 8 有多重"),
    ("shop", "mixed", S, "lang_mix", "order SO2024090912 到哪了", "where is my order SO2024090912"),
    # --- e-commerce, different ---
    ("shop", "en", D, "entity", "how much does the galaxy s24 cost", "how much does the pixel 8 cost"),
    ("shop", "en", D, "attribute", "pixel 8 price", "pixel 8 weight"),
    ("shop", "en", D, "id", "where is my order SO2024090912", "where is my order SO2024090921"),
    ("shop", "en", D, "entity", "iPhone 15 battery life", "iPhone 15 Pro battery life"),
    ("shop", "en", D, "negation", "can i return an opened item", "can i return an unopened item"),
    ("shop", "en", D, "quantity", "price for 2 xiaomi 14", "price for 3 xiaomi 14"),
    ("shop", "en", D, "attribute", "mate 60 screen size", "mate 60 screen resolution"),
    ("shop", "en", D, "modifier", "galaxy s24 price", "galaxy s24 case price"),
    ("shop", "en", D, "unit", "xiaomi 14 weight in grams", "xiaomi 14 weight in ounces"),
    ("shop", "en", D, "attribute", "has my order SO2024090912 shipped", "can i cancel my order SO2024090912"),
    ("shop", "zh", D, "entity", "小米14多少钱", "小米14 Pro多少钱"),
    ("shop", "zh", D, "attribute", "华为mate60多重", "华为mate60多厚"),
    ("shop", "zh", D, "attribute", "订单SO2024090912到哪了", "订单SO2024090912能退款吗"),
    ("shop", "zh", D, "negation", "拆封了能退吗", "没拆封能退吗"),
    ("shop", "zh", D, "entity", "三星S24续航多久", "三星S23续航多久"),
    ("shop", "zh", D, "quantity", "买两台iPhone 15多少钱", "买一台iPhone 15多少钱"),
    ("shop", "zh", D, "attribute", "Pixel 8 充电多快", "Pixel 8 充电器多少钱"),
    ("shop", "zh", D, "unit", "小米14多少克", "小米14多少斤"),
    ("shop", "mixed", D, "entity", "galaxy s24 多少钱", "galaxy s24 ultra 多少钱"),
    ("shop", "mixed", D, "attribute", "小米14 battery life", "小米14 battery capacity"),
    ("shop", "mixed", D, "id", "order PO2024111111 发货了吗", "order PO2024111112 发货了吗"),
    ("shop", "mixed", D, "negation", "iphone 15 防水吗", "iphone 15 不防水吗"),
    # --- airline, same ---
    ("air", "en", S, "paraphrase", "how many bags can i check in economy", "Economy checked baggage allowance"),
    ("air", "en", S, "paraphrase", "is flight CA981 on time", "CA981 flight status"),
    ("air", "en", S, "filler", "hi, quick one: business class change fee?", "How much is the business class change fee?"),
    ("air", "en", S, "typo", "fligth status MU5101", "flight status MU5101"),
    ("air", "en", S, "paraphrase", "can i get my money back on a first class ticket", "First class refund policy"),
    ("air", "en", S, "paraphrase", "whats the carry on limit in economy", "Economy carry-on allowance"),
    ("air", "en", S, "case", "FLIGHT STATUS CZ3101", "flight status cz3101"),
    ("air", "en", S, "filler", "could you please tell me the business class baggage allowance", "Business class baggage allowance"),
    ("air", "en", S, "paraphrase", "when can i start checking in", "When does check-in open?"),
    ("air", "en", S, "contraction", "what's the status of UA888", "What is the status of flight UA888?"),
    ("air", "zh", S, "paraphrase", "经济舱能托运几件行李", "经济舱托运行李额"),
    ("air", "zh", S, "paraphrase", "CA981航班怎么还没起飞", "CA981航班状态"),
    ("air", "zh", S, "filler", "您好，请问商务舱改签要多少钱", "商务舱改签费"),
    ("air", "zh", S, "paraphrase", "头等舱的票能退吗", "头等舱退票政策"),
    ("air", "zh", S, "paraphrase", "经济舱随身能带多大的箱子", "经济舱手提行李额"),
    ("air", "zh", S, "paraphrase", "MU5101现在什么情况", "MU5101航班状态"),
    ("air", "zh", S, "paraphrase", "几点开始值机", "什么时候开始值机"),
    ("air", "zh", S, "paraphrase", "商务舱行李能带多少", "商务舱行李额是多少"),
    ("air", "mixed", S, "lang_mix", "CA981 status 怎么样", "CA981航班状态"),
    ("air", "mixed", S, "lang_mix", "economy 托运行李额", "经济舱托运行李额多少"),
    ("air", "mixed", S, "lang_mix", "first class 退票政策", "头等舱退票政策"),
    ("air", "mixed", S, "lang_mix", "请问 business class 改签费", "business class change fee"),
    # --- airline, different ---
    ("air", "en", D, "id", "flight status CA981", "flight status CA918"),
    ("air", "en", D, "entity", "economy checked bag allowance", "business checked bag allowance"),
    ("air", "en", D, "attribute", "first class refund policy", "first class change fee"),
    ("air", "en", D, "attribute", "when does check-in open", "when does boarding start"),
    ("air", "en", D, "order", "flights from beijing to tokyo", "flights from tokyo to beijing"),
    ("air", "en", D, "negation", "is the economy fare refundable", "is the economy fare not refundable"),
    ("air", "en", D, "quantity", "fee for 1 extra checked bag", "fee for 2 extra checked bags"),
    ("air", "en", D, "modifier", "economy carry-on allowance", "economy carry-on allowance for infants"),
    ("air", "en", D, "unit", "economy checked bag limit in kg", "economy checked bag limit in pieces"),
    ("air", "en", D, "attribute", "business class lounge access", "business class seat selection fee"),
    ("air", "zh", D, "entity", "经济舱托运行李额", "头等舱托运行李额"),
    ("air", "zh", D, "attribute", "商务舱退票费", "商务舱改签费"),
    ("air", "zh", D, "id", "MU5101航班状态", "MU5110航班状态"),
    ("air", "zh", D, "order", "北京飞上海的航班", "上海飞北京的航班"),
    ("air", "zh", D, "attribute", "什么时候开始值机", "什么时候停止值机"),
    ("air", "zh", D, "unit", "手提行李限重几公斤", "手提行李限几件"),
    ("air", "zh", D, "negation", "经济舱票能退吗", "经济舱票不能退吗"),
    ("air", "mixed", D, "entity", "economy 行李额", "premium economy 行李额"),
    ("air", "mixed", D, "attribute", "CA981 status", "CA981 登机口"),
    ("air", "mixed", D, "attribute", "first class 退票", "first class 选座"),
    ("air", "mixed", D, "order", "上海 to 东京 flights", "东京 to 上海 flights"),
    ("air", "mixed", D, "quantity", "带 1 个 extra bag 多少钱", "带 3 个 extra bag 多少钱"),
    # --- mobile plans, same ---
    ("tel", "en", S, "paraphrase", "how much data do i get on the plus plan", "Plus plan data allowance"),
    ("tel", "en", S, "paraphrase", "whats the monthly cost of the lite plan", "Lite plan price per month"),
    ("tel", "en", S, "filler", "hello, can i use my phone as a hotspot on plus?", "Does the Plus plan include hotspot?"),
    ("tel", "en", S, "paraphrase", "i want to bring my number over from another carrier", "How do I port my number?"),
    ("tel", "en", S, "typo", "romaing fee in japan", "roaming fee in Japan"),
    ("tel", "en", S, "paraphrase", "how do i set up an esim", "How do I activate an eSIM?"),
    ("tel", "en", S, "paraphrase", "cost of calling the uk from here", "International call rate to the UK"),
    ("tel", "en", S, "filler", "quick question, does lite have 5g", "Does the Lite plan support 5G?"),
    ("tel", "en", S, "paraphrase", "how can i top up my prepaid", "How do I top up?"),
    ("tel", "en", S, "contraction", "what's the roaming charge in korea", "What is the roaming charge in Korea?"),
    ("tel", "zh", S, "paraphrase", "Plus套餐一个月多少流量", "Plus套餐流量多少"),
    ("tel", "zh", S, "paraphrase", "如何携号转网", "携号转网怎么办"),
    ("tel", "zh", S, "paraphrase", "去日本漫游怎么收费", "日本漫游资费"),
    ("tel", "zh", S, "filler", "你好，麻烦问一下eSIM怎么开通", "怎么开通eSIM"),
    ("tel", "zh", S, "paraphrase", "Lite套餐支不支持5G", "Lite套餐有5G吗"),
    ("tel", "zh", S, "paraphrase", "如何充值话费", "怎么充话费"),
    ("tel", "zh", S, "paraphrase", "打英国电话贵不贵", "英国国际通话资费"),
    ("tel", "zh", S, "paraphrase", "Plus套餐能开热点吗", "Plus套餐支持热点吗"),
    ("tel", "mixed", S, "lang_mix", "plus plan 一个月多少钱", "Plus套餐月费"),
    ("tel", "mixed", S, "lang_mix", "韩国 roaming 多少钱", "roaming fee in Korea"),
    ("tel", "mixed", S, "lang_mix", "eSIM 怎么 activate", "怎么开通eSIM"),
    ("tel", "mixed", S, "lang_mix", "lite plan 有 5G 吗", "Does the Lite plan support 5G?"),
    # --- mobile plans, different ---
    ("tel", "en", D, "entity", "plus plan data allowance", "lite plan data allowance"),
    ("tel", "en", D, "entity", "roaming fee in japan", "roaming fee in china"),
    ("tel", "en", D, "attribute", "plus plan monthly price", "plus plan hotspot limit"),
    ("tel", "en", D, "negation", "how do i activate my esim", "how do i deactivate my esim"),
    ("tel", "en", D, "quantity", "family plan price for 3 lines", "family plan price for 5 lines"),
    ("tel", "en", D, "modifier", "call rate to the uk", "sms rate to the uk"),
    ("tel", "en", D, "attribute", "how do i port my number in", "how do i cancel my number"),
    ("tel", "en", D, "unit", "plus plan data in gb", "plus plan minutes"),
    ("tel", "en", D, "entity", "does the prepaid plan support 5g", "does the family plan support 5g"),
    ("tel", "en", D, "attribute", "how do i check my data balance", "how do i check my credit balance"),
    ("tel", "zh", D, "entity", "日本漫游资费", "韩国漫游资费"),
    ("tel", "zh", D, "attribute", "Plus套餐月费", "Plus套餐流量"),
    ("tel", "zh", D, "negation", "怎么开通国际漫游", "怎么关闭国际漫游"),
    ("tel", "zh", D, "quantity", "家庭套餐加两张副卡多少钱", "家庭套餐加四张副卡多少钱"),
    ("tel", "zh", D, "attribute", "怎么查话费", "怎么查流量"),
    ("tel", "zh", D, "entity", "Lite套餐有5G吗", "Max套餐有5G吗"),
    ("tel", "zh", D, "modifier", "打英国电话多少钱", "发短信到英国多少钱"),
    ("tel", "mixed", D, "entity", "plus plan 热点", "lite plan 热点"),
    ("tel", "mixed", D, "attribute", "eSIM 怎么开通", "eSIM 怎么转移"),
    ("tel", "mixed", D, "entity", "roaming 日本", "roaming 美国"),
    ("tel", "mixed", D, "negation", "怎么 activate roaming", "怎么 deactivate roaming"),
    ("tel", "mixed", D, "quantity", "family plan 2 lines 多少钱", "family plan 6 lines 多少钱"),
    # --- bank cards, same ---
    ("bank", "en", S, "paraphrase", "how much do i pay each year for the gold card", "Gold card annual fee"),
    ("bank", "en", S, "paraphrase", "i lost my card what do i do", "What should I do if I lose my card?"),
    ("bank", "en", S, "filler", "hi, can you tell me how to freeze my card please", "How do I freeze my card?"),
    ("bank", "en", S, "typo", "platnum card annual fee", "Platinum card annual fee"),
    ("bank", "en", S, "paraphrase", "will i be charged for using the classic card abroad", "Classic card foreign transaction fee"),
    ("bank", "en", S, "paraphrase", "how do i raise my credit limit", "How can I increase my credit limit?"),
    ("bank", "en", S, "contraction", "what's the interest rate on the gold card", "What is the interest rate on the Gold card?"),
    ("bank", "en", S, "paraphrase", "new card arrived, how do i turn it on", "How do I activate my card?"),
    ("bank", "en", S, "filler", "thanks! what's the atm withdrawal fee", "ATM withdrawal fee"),
    ("bank", "en", S, "paraphrase", "when do i have to pay my bill", "When is my payment due?"),
    ("bank", "zh", S, "paraphrase", "金卡一年要交多少钱", "金卡年费多少"),
    ("bank", "zh", S, "paraphrase", "卡丢了怎么办", "信用卡丢失怎么办"),
    ("bank", "zh", S, "filler", "您好，请问怎么冻结信用卡", "如何冻结信用卡"),
    ("bank", "zh", S, "paraphrase", "白金卡在国外刷卡收手续费吗", "白金卡境外手续费"),
    ("bank", "zh", S, "paraphrase", "怎么提额", "如何提高信用额度"),
    ("bank", "zh", S, "paraphrase", "新卡怎么激活", "如何激活信用卡"),
    ("bank", "zh", S, "paraphrase", "ATM取现手续费多少", "取现手续费是多少"),
    ("bank", "zh", S, "paraphrase", "还款日是哪天", "什么时候还款"),
    ("bank", "mixed", S, "lang_mix", "gold card 年费是多少", "Gold card annual fee"),
    ("bank", "mixed", S, "lang_mix", "怎么 freeze 信用卡", "如何冻结信用卡"),
    ("bank", "mixed", S, "lang_mix", "platinum card 境外手续费", "白金卡境外手续费"),
    ("bank", "mixed", S, "lang_mix", "credit limit 怎么提高", "如何提高信用额度"),
    # --- bank cards, different ---
    ("bank", "en", D, "entity", "gold card annual fee", "classic card annual fee"),
    ("bank", "en", D, "attribute", "gold card annual fee", "gold card late fee"),
    ("bank", "en", D, "negation", "how do i freeze my card", "how do i unfreeze my card"),
    ("bank", "en", D, "modifier", "atm withdrawal fee", "atm withdrawal fee abroad"),
    ("bank", "en", D, "quantity", "can i withdraw 500 a day", "can i withdraw 5000 a day"),
    ("bank", "en", D, "attribute", "what do i do if i lose my card", "what do i do if my card is stolen"),
    ("bank", "en", D, "negation", "what happens if i pay on time", "what happens if i don't pay on time"),
    ("bank", "en", D, "attribute", "how do i increase my credit limit", "how do i check my credit limit"),
    ("bank", "en", D, "entity", "platinum card interest rate", "gold card interest rate"),
    ("bank", "en", D, "attribute", "how do i activate my card", "how do i cancel my card"),
    ("bank", "zh", D, "entity", "金卡年费多少", "普卡年费多少"),
    ("bank", "zh", D, "attribute", "白金卡年费", "白金卡取现手续费"),
    ("bank", "zh", D, "negation", "怎么冻结信用卡", "怎么解冻信用卡"),
    ("bank", "zh", D, "quantity", "一天最多取两千吗", "一天最多取两万吗"),
    ("bank", "zh", D, "attribute", "卡丢了怎么办", "卡被吞了怎么办"),
    ("bank", "zh", D, "negation", "按时还款会怎样", "没按时还款会怎样"),
    ("bank", "zh", D, "attribute", "怎么提额", "怎么查额度"),
    ("bank", "mixed", D, "entity", "gold card 年费", "platinum card 年费"),
    ("bank", "mixed", D, "attribute", "信用卡 interest rate", "信用卡 annual fee"),
    ("bank", "mixed", D, "negation", "怎么 freeze 卡", "怎么 unfreeze 卡"),
    ("bank", "mixed", D, "modifier", "ATM 取现手续费", "国外 ATM 取现手续费"),
    ("bank", "mixed", D, "attribute", "gold card 怎么激活", "gold card 怎么注销"),
]  # fmt: skip


def rows() -> list[dict[str, str]]:
    return [
        {
            "id": f"h2-{domain}-{i:03d}", "split": SPLIT, "domain": domain, "policy": POLICY[domain],
            "lang": lang, "label": label, "kind": kind, "cached": cached, "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(PAIRS)
    ]  # fmt: skip


def main() -> None:
    OUT.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows()))
    print(f"{OUT}: {len(PAIRS)} pairs")


if __name__ == "__main__":
    main()
