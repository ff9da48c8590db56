"""The runtime's logger: ``blinkflow`` at ``BLINKFLOW_LOG_LEVEL``, lines prefixed with the rank."""
from __future__ import annotations

import logging
import sys

_LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "fatal": logging.CRITICAL}

logger = logging.getLogger("blinkflow")


def configure(level: str, rank: int) -> logging.Logger:
    """Give the logger a stderr handler (once) that names the rank; set the level."""
    logger.setLevel(_LEVELS.get(level, logging.WARNING))
    ours = [h for h in logger.handlers if getattr(h, "_blinkflow", False)]
    handler = ours[0] if ours else logging.StreamHandler(sys.stderr)
    handler._blinkflow = True
    handler.setFormatter(logging.Formatter(f"[blinkflow rank {rank}] %(levelname)s: %(message)s"))
    if not ours:
        logger.addHandler(handler)
        logger.propagate = False
    return logger
