"""LoRA adapters on a simulated replica, as vLLM serves them.

Adapters are listed by ``/v1/models`` as models whose ``parent`` is the base model; a request names one
as its ``model``; its prefix-cache blocks are hashed apart from the base model's and every other
adapter's (vLLM puts the LoRA in each block's hash). With ``allow_runtime_lora`` (vLLM's
``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``
change the set; without it they do not exist (404), as in vLLM.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sim.http import REPLICA_KEY, BadRequest, error_response, read_body
from sim.state import Replica


def cache_seed(rep: Replica, model: str, salt: str | None) -> str | None:
    """The first seed of a request's block hashes: its cache_salt, and the adapter when it names one."""
    if model not in rep.adapters:
        return salt
    return f"{salt or ''}\x00lora:{model}"


def listed(rep: Replica) -> list[dict[str, Any]]:
    base = rep.model_name
    return [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": path or name,
            "parent": base,
            "max_model_len": rep.cfg.max_model_len,
        }
        for name, path in rep.adapters.items()
    ]


async def _name(request: web.Request) -> tuple[Replica, dict[str, Any], str]:
    rep = request.app[REPLICA_KEY]
    if not rep.cfg.allow_runtime_lora:
        raise web.HTTPNotFound()
    body = await read_body(request)
    name = body.get("lora_name")
    if not isinstance(name, str) or not name:
        raise BadRequest(400, "lora_name is required", "lora_name")
    return rep, body, name


async def load_adapter(request: web.Request) -> web.Response:
    try:
        rep, body, name = await _name(request)
        path = body.get("lora_path")
        if not isinstance(path, str) or not path:
            raise BadRequest(400, "lora_path is required", "lora_path")
        if name in rep.adapters:
            raise BadRequest(400, f"The lora adapter '{name}' has already been loaded.")
    except BadRequest as exc:
        return error_response(exc.status, str(exc), exc.param)
    rep.adapters[name] = path
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_adapter(request: web.Request) -> web.Response:
    try:
        rep, _, name = await _name(request)
        if name not in rep.adapters:
            raise BadRequest(404, f"The lora adapter '{name}' cannot be found.", "lora_name")
    except BadRequest as exc:
        return error_response(exc.status, str(exc), exc.param)
    del rep.adapters[name]
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/load_lora_adapter", load_adapter)
    app.router.add_post("/v1/unload_lora_adapter", unload_adapter)
