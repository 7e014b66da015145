"""The one error of the emulator's patches of moto's internals (`local.emulator`,
`local.moto_expressions`): a module of its own so that both can raise it without importing
each other."""

from __future__ import annotations


class MotoInternalsMissing(RuntimeError):
    """A moto internal the emulator patches is gone (a moto outside the pinned range):
    failing beats running without the serialization lock or the stream wakeups."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"ezgh dev patches {what}, which this moto lacks; install the moto version range "
            "pinned in pyproject.toml"
        )
