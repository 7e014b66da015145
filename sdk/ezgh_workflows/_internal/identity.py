"""Step identity (protocol section 3, seed 001).

A step without ``id=`` is ``<name>#<n>``, ``n`` counting from 1 the steps of that name asked
for so far (steps with an explicit ID do not count). An explicit ID matches
``^[A-Za-z0-9._:-]{1,128}$`` and names one step for the whole run.

A patch marker (``ctx.step.patched(patch_id)``) is a ``value`` step with the explicit ID
``patched:<patch_id>``: replay and the replay gate know it by that prefix.
"""

from __future__ import annotations

import re

from .errors import DuplicateStepNameError

NAME_MAX_BYTES = 256
_EXPLICIT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
PATCH_PREFIX = "patched:"


def validate_name(name: object) -> str:
    """A step name: a str of 1 to 256 UTF-8 bytes without NUL; `ValueError` otherwise."""
    if not isinstance(name, str):
        raise ValueError(f"step name must be a str, not {type(name).__name__}")
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if not 1 <= size <= NAME_MAX_BYTES:
        raise ValueError(f"step name must be 1 to {NAME_MAX_BYTES} bytes of UTF-8, got {size}")
    if "\x00" in name:
        raise ValueError("step name must not contain NUL characters")
    return name


def validate_explicit_id(step_id: object) -> str:
    """An explicit step ID matching ``^[A-Za-z0-9._:-]{1,128}$``; `ValueError` otherwise."""
    if not isinstance(step_id, str) or not _EXPLICIT_ID.fullmatch(step_id):
        raise ValueError(f"invalid step id {step_id!r}: must match ^[A-Za-z0-9._:-]{{1,128}}$")
    return step_id


def patch_step_id(patch_id: object) -> str:
    """The step ID of patch ``patch_id``'s marker; `ValueError` for an ID that does not
    match ``^[A-Za-z0-9._:-]{1,120}$``."""
    if not isinstance(patch_id, str) or not patch_id:
        raise ValueError(f"invalid patch id {patch_id!r}: a non-empty str")
    step_id = PATCH_PREFIX + patch_id
    if not _EXPLICIT_ID.fullmatch(step_id):
        raise ValueError(
            f"invalid patch id {patch_id!r}: must match ^[A-Za-z0-9._:-]{{1,{128 - len(PATCH_PREFIX)}}}$"
        )
    return step_id


def is_patch_marker(step_id: str) -> bool:
    """Whether a recorded step is a patch marker (`patch_step_id`)."""
    return step_id.startswith(PATCH_PREFIX)


class StepIds:
    """Allocates step IDs for one invocation, in the order the workflow asks for steps."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._explicit: set[str] = set()

    def allocate(self, name: str, explicit_id: str | None) -> str:
        if explicit_id is None:
            count = self._counts.get(name, 0) + 1
            self._counts[name] = count
            return f"{name}#{count}"
        if explicit_id in self._explicit:
            raise DuplicateStepNameError(
                f"step id {explicit_id!r} is used twice in this run (step name {name!r}); "
                "explicit ids must be unique in a run"
            )
        self._explicit.add(explicit_id)
        return explicit_id

    def asked(self, step_id: str) -> bool:
        """Whether the workflow has asked for the step ``step_id`` so far."""
        name, sep, count = step_id.rpartition("#")
        if sep and count.isdigit():
            return self._counts.get(name, 0) >= int(count)
        return step_id in self._explicit
