"""Running a gateway: uvicorn on the configured host and port.

(`up` starts one as a process; its command line is built in
:func:`splitserve.cluster.gateway_plan`.)
"""

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


__all__ = ["serve"]
