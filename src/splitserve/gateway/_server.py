"""Running a gateway: uvicorn on the configured host and port."""

from __future__ import annotations

import logging

from ._app import GatewayConfig, create_app
from ._auth import require_auth_off_loopback


def serve(config: GatewayConfig, log_level: str = "warning") -> None:
    """Serve until interrupted; refuses a non-loopback host without API keys."""
    import uvicorn

    require_auth_off_loopback(config.host, config.keys)
    app = create_app(config)
    uv = uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level,
                        access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    logging.getLogger("uvicorn.error").propagate = False
    uvicorn.Server(uv).run()


def gateway_argv(engine_url: str, *, host: str = "127.0.0.1", port: int = 8000,
                 python: str | None = None, model_format: str | None = None,
                 chat_template_file: str | None = None, api_key_env: bool = False,
                 keys_file: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The command line of a gateway process in front of ``engine_url`` (for a launch plan).

    Pass the API key through the ``SPLITSERVE_API_KEY`` environment variable
    (``api_key_env=True`` only documents that it is expected), never on the command line.
    """
    import sys

    argv = [python or sys.executable, "-m", "splitserve", "serve", "--engine", engine_url,
            "--host", host, "--port", str(port)]
    if model_format:
        argv += ["--model-format", model_format]
    if chat_template_file:
        argv += ["--chat-template", chat_template_file]
    if keys_file:
        argv += ["--keys-file", keys_file]
    del api_key_env
    return argv + list(extra or [])


__all__ = ["gateway_argv", "serve"]
