"""Structured logs: Powertools' JSON logger for every line the engine writes, each carrying
the IDs of the work it is about.

The engine's modules log through stdlib `logging` (`logging.getLogger(__name__)`): they stay
free of any logging setup, and the core logs nothing. A handler calls `configure(service)`
once: in Lambda it makes a Powertools `Logger` and copies its JSON handler to the engine's
loggers (`copy_config_to_registered_loggers`), with `ContextFilter` on it, which adds the IDs
`bound` holds for the work in progress (a context variable: the run, step, invocation and
app being handled, set where that work begins: the invoker, the stream's records, the
step calls). Elsewhere (a test that imports a handler, `ezgh dev`'s execution environments)
the engine's loggers are left as they are, so tests keep reading their records and
`ezgh dev` keeps its terminal readable; its runs are shown by its own lines (`progress`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ezgh_engine.observability import sinks

ENGINE_LOGGER = "ezgh_engine"
_IDS: ContextVar[dict[str, str]] = ContextVar("ezgh_log_ids", default={})  # noqa: B039


@contextlib.contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Every log line written inside carries these IDs (`run_id`, `step_id`,
    `invocation_id`, `app_id`; None ones are left out), on top of those bound outside."""
    token = _IDS.set({**_IDS.get(), **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        _IDS.reset(token)


def also(**ids: str | None) -> None:
    """Inside a `bound` block: add IDs learnt on the way (the run's app, once read); the
    block's end forgets them with its own."""
    _IDS.set({**_IDS.get(), **{k: v for k, v in ids.items() if v}})


def current() -> dict[str, str]:
    """The IDs bound here."""
    return dict(_IDS.get())


class ContextFilter(logging.Filter):
    """Adds the bound IDs to each record (Powertools' JSON formatter writes a record's extra
    attributes as keys of its line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _IDS.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


_FILTER = ContextFilter()


def install_filter(handler: logging.Handler) -> None:
    if _FILTER not in handler.filters:
        handler.addFilter(_FILTER)


def configure(service: str) -> Any:
    """Set up the function's logging (see the module's doc); answers its Powertools
    `Logger` (its level: `POWERTOOLS_LOG_LEVEL`, else `LOG_LEVEL`, else INFO)."""
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    logger = Logger(service=service)
    for handler in logger.handlers:
        install_filter(handler)
    if sinks.in_lambda():
        logging.getLogger(ENGINE_LOGGER)  # registered, so that it is copied to
        copy_config_to_registered_loggers(source_logger=logger, include={ENGINE_LOGGER})
    return logger
