"""cdk-nag suppressions, always with a written reason next to the resource they excuse."""

from __future__ import annotations

from collections.abc import Sequence

from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import IConstruct


def suppress(
    construct: IConstruct,
    rule: str,
    reason: str,
    *,
    applies_to: Sequence[str | RegexAppliesTo] | None = None,
    children: bool = False,
) -> None:
    """Suppress AwsSolutions `rule` on `construct` (and its children when `children`).

    `applies_to` narrows an IAM5-style suppression to the findings named, so a new wildcard
    added later is still reported.
    """
    NagSuppressions.add_resource_suppressions(
        construct,
        [NagPackSuppression(id=f"AwsSolutions-{rule}", reason=reason, applies_to=applies_to)],
        apply_to_children=children,
    )


def matching(pattern: str) -> RegexAppliesTo:
    """An `applies_to` entry for findings matching a regex, e.g. '^Resource::<Runs.*>/index/\\*$'."""
    return RegexAppliesTo(regex=f"/{pattern}/")
