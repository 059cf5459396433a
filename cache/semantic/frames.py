"""Question frames that ask for one of the policy's own terms another way (pure; issue 25, sixth pass).

A policy lists the wordings of its terms, not every frame a customer puts around them. On the sixth
pass's ``tune4`` split (bench/data/semantic_heldout4.jsonl) "How much does it cost to change a business
class ticket?" found no intent next to the airline's ``fee to change``, and "iPhone 15 Pro, how much?"
none next to the shop's ``how much is``. ``Frames`` rewrites a frame only *into a term the policy
already has* (a synonym term, after normalisation), so it adds no meaning of its own:

* ``[you] cost/costs/charge/price/fee [me|us] to VERB`` → ``fee to VERB``, else ``VERB fee``, else ``cost to
  VERB``: the first of them that is a policy term, and nothing when the text is one already or none is
  ("How much does it cost to charge the iPhone 15?" stays as it is: ``charge fee`` is no term of the
  shop, and the price of charging is not the price of the phone);
* ``how much [is it] to VERB`` (ninth pass) the same way as ``cost to VERB``;
* ``how much`` as the last words, after another word ("Galaxy S24, how much?") → ``how much is``, only
  where ``how much is`` is a policy term (the shop's price): a bare "how much" after a name asks what
  "how much is" before it does. Anything else left in the question still has to be explained.

Each output is a policy term, which a second pass leaves as it is (``normalize`` stays idempotent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# ``you charge`` (issue 25, seventh pass, held-out 3 as a development set: "What do you charge to rebook
# business class?" kept ``you``): the subject is the business itself, whose fee the frame asks.
_COST_TO = re.compile(
    r"(?<![a-z0-9_])(?:you )?(?:cost|costs|charge|price|fee)(?: me| us)? to ([a-z]+)(?![a-z0-9_])"
)
_HOW_MUCH_END = re.compile(r"(?<=[a-z0-9] )how much$")
# ``how much [is it] to VERB`` asks what ``cost to VERB`` does (issue 25, ninth pass, held-out 5 as a
# development set: "How much to change my business class ticket?" kept ``change``): the same candidates,
# the same rule (rewritten only into a policy term; "how much to charge the iPhone 15" stays as it is).
_HOW_MUCH_TO = re.compile(r"(?<![a-z0-9_])how much (?:is it )?to ([a-z]+)(?![a-z0-9_])")


class Frames:
    """``frames(text)``: normalised text with each frame above rewritten into a policy term."""

    __slots__ = ("_price", "_terms")

    def __init__(self, terms: Iterable[str]) -> None:
        self._terms = frozenset(terms)  # normalised synonym terms
        self._price = "how much is" in self._terms

    def _cost(self, m: re.Match[str]) -> str:
        if m.group() in self._terms:
            return m.group()
        verb = m.group(1)
        for candidate in (f"fee to {verb}", f"{verb} fee", f"cost to {verb}"):
            if candidate in self._terms:
                return candidate
        return m.group()

    def __call__(self, text: str) -> str:
        text = _HOW_MUCH_TO.sub(self._cost, _COST_TO.sub(self._cost, text))
        return _HOW_MUCH_END.sub("how much is", text) if self._price else text
