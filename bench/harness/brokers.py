"""A Kafka broker for a bench run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def kafka_bootstrap(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap`` when given, else that of a ``noida-db`` broker process started for
    the block (tests/kafka_broker.py)."""
    if bootstrap:
        yield bootstrap
        return
    from tests.kafka_broker import start_broker

    with start_broker("process") as broker:
        yield broker.bootstrap
