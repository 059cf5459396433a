"""The layout advisor's observation: a ``routed`` hook on a request's first attempt, sampled.

The advisor (``cache.advisor``, owned by the process) keeps bounded, salted sketches of each tenant's
prompts: the router's block hashes of this decision and content-defined chunks of the rendering. A
request is observed with probability ``advisor.sample_rate`` (1 % by default): the unsampled path
costs one random draw; a sampled one re-renders the prompt (about 150 µs for 1,400 tokens,
``python -m bench.advisor``). Policies that do not hash prompts (``round_robin``, ``least_load``) give
the advisor nothing to observe.
"""

from __future__ import annotations

from array import array

from gateway.pipeline.context import RequestContext
from router.prompt import render_prompt

OBSERVED_ENDPOINTS = frozenset(("chat", "completions"))


def observe(ctx: RequestContext) -> None:
    advisor, parsed = ctx.process.advisor, ctx.parsed
    # The endpoint the stages saw: a Responses or Messages request is a chat request here.
    endpoint = parsed.endpoint if parsed is not None else ctx.endpoint
    if len(ctx.attempts) != 1 or endpoint not in OBSERVED_ENDPOINTS or not advisor.sampled():
        return
    d = ctx.decision  # only for the sampled ones
    if d is None or not d.block_hashes or parsed is None or ctx.tenant is None or ctx.pool is None:
        return
    rendered = render_prompt(endpoint, parsed.body)  # what the router hashed
    data = (
        array("I", rendered).tobytes()
        if isinstance(rendered, list)
        else rendered.encode("utf-8", "surrogatepass")
    )
    advisor.observe(
        ctx.tenant.id,
        ctx.tenant.salt,
        ctx.pool.name,
        data,
        d.prompt_tokens,
        d.block_hashes,
        chat=endpoint == "chat",
        marked_tokens=ctx.marked.prefix_tokens if ctx.marked is not None else 0,
    )
