"""The common field checks of ``gateway.pipeline.parse.validate`` (``_check_common``): which field's error a
client sees, in what words, and that absent or null fields pass. Pinned because the checks were rewritten
for fewer calls (``in`` before indexing instead of ``dict.get``); the answers must not move."""

from __future__ import annotations

from typing import Any

import pytest

from config.policy import LimitsConfig
from gateway.errors import GatewayError
from gateway.pipeline.parse import validate

LIMITS = LimitsConfig()


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def refused(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        validate("chat", body, LIMITS)
    return info.value


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"stream": "yes"}, "stream", "'stream' must be a boolean"),
        ({"max_tokens": "8"}, "max_tokens", "'max_tokens' must be an integer"),
        ({"n": True}, "n", "'n' must be an integer"),
        ({"seed": 1.5}, "seed", "'seed' must be an integer"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "'max_completion_tokens' must be at least 1"),
        ({"temperature": "hot"}, "temperature", "'temperature' must be a number"),
        ({"top_p": False}, "top_p", "'top_p' must be a number"),
        # several bad fields: the first in the checks' order is the one named
        ({"temperature": "hot", "max_tokens": "8"}, "max_tokens", "'max_tokens' must be an integer"),
        ({"max_tokens": 0, "seed": "s"}, "seed", "'seed' must be an integer"),
        ({"stream": 1, "max_tokens": "8"}, "stream", "'stream' must be a boolean"),
    ],
)
def test_a_bad_field_is_named_in_the_error(extra: dict[str, Any], param: str, message: str) -> None:
    err = refused(chat(**extra))
    assert (err.status, err.param, err.message) == (400, param, message)


def test_absent_and_null_fields_pass() -> None:
    nulls = dict.fromkeys(("stream", "max_tokens", "n", "seed", "temperature", "top_p", "best_of"))
    for body in (chat(), chat(**nulls), chat(max_tokens=8, n=1, temperature=0, top_p=0.5, stream=True)):
        parsed = validate("chat", body, LIMITS)
        assert parsed.model == "m"
