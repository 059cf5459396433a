"""Memory stays bounded under the largest bodies (a real gateway process, RSS from psutil): the bound
and its history are in ``bench.memory``, which also draws the whole curve (``python -m bench.memory``:
200 and 40 requests). The regression this guards against grew 31 MB a request; 20 requests of the
issue's body and 10 near-limit ones after their warm-ups prove the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.memory import run

ISSUE, NEAR = 30, 20


@pytest.mark.slow
def test_rss_stays_bounded_under_the_issue_body_and_near_limit_bodies(tmp_path: Path) -> None:
    result = run(tmp_path, issue=ISSUE, near=NEAR)
    assert result.problems(ISSUE, NEAR) == []
    assert len(result.curve) == ISSUE + NEAR and set(result.growth_mib) == {"issue", "near"}
    assert result.wall_s < 300
