"""The new code for the runs deploy_v1.py started: each workflow changed as its comment says.

What the replay gate says of each run in flight (sleeping in `cooldown`), and what the run
then does on this code:

| workflow | change | gate | the run on this code |
| --- | --- | --- | --- |
| newsletter | the first of three `send` steps removed | counter_shift | completes, with the old `send#1`/`send#2` results given to `tips`/`survey` |
| profile | `load-user` renamed `fetch-user` | new_step | runs `fetch-user` again (the work twice) |
| reminder | `cooldown` a `run` step instead of a sleep | nondeterminism | fails `workflows.nondeterminism` |
| notify | `notify` moved into a loop over the recipients | counter_shift | `notify#1` gets the owner's result for `ana` |
| digest | a step appended after the last | passes | completes, and runs `archive` |
| invites | explicit IDs in the loop, behind `patched` | passes | completes on the old path |
| invites-wrong | explicit IDs in the loop, no patch | new_step | sends every invitation again |
"""

from __future__ import annotations

from typing import Any

from ezgh_workflows import Context, PushApp, workflow

from tests.e2e import deploy_v1
from tests.e2e.deploy_v1 import RECIPIENTS, work


@workflow("newsletter")
async def newsletter(ctx: Context) -> Any:
    """The welcome step removed: `tips` is now send#1, `survey` send#2."""
    tips = await ctx.step.run("send", lambda: work("send tips", "tips sent"))
    survey = await ctx.step.run("send", lambda: work("send survey", "survey sent"))
    await ctx.step.sleep("cooldown", "3d")
    return {"tips": tips, "survey": survey}


@workflow("profile")
async def profile(ctx: Context) -> Any:
    user = await ctx.step.run("fetch-user", lambda: work("load user", {"email": "a@x.io"}))
    await ctx.step.sleep("cooldown", "3d")
    return user


@workflow("reminder")
async def reminder(ctx: Context) -> Any:
    await ctx.step.run("remind", lambda: work("remind"))
    await ctx.step.run("cooldown", lambda: work("wait differently"))
    return "reminded"


@workflow("notify")
async def notify(ctx: Context) -> Any:
    sent = [
        await ctx.step.run("notify", lambda r=r: work(f"notify {r}", f"{r} notified"))
        for r in RECIPIENTS
    ]
    await ctx.step.sleep("cooldown", "3d")
    return sent


@workflow("digest")
async def digest(ctx: Context) -> Any:
    built = await ctx.step.run("build", lambda: work("build", "digest"))
    await ctx.step.sleep("cooldown", "3d")
    delivered = await ctx.step.run("deliver", lambda: work("deliver", f"{built} delivered"))
    await ctx.step.run("archive", lambda: work("archive"))
    return delivered


@workflow("invites")
async def invites(ctx: Context) -> Any:
    if await ctx.step.patched("invite-ids"):
        sent = [
            await ctx.step.run(
                "invite", lambda r=r: work(f"invite {r}", f"invited {r}"), id=f"invite-{r}"
            )
            for r in RECIPIENTS
        ]
    else:  # runs started on the old code: the old loop, until none is left
        sent = [
            await ctx.step.run("invite", lambda r=r: work(f"invite {r}", f"invited {r}"))
            for r in RECIPIENTS
        ]
    await ctx.step.sleep("cooldown", "3d")
    return sent


@workflow("invites-wrong")
async def invites_wrong(ctx: Context) -> Any:
    sent = [
        await ctx.step.run(
            "invite", lambda r=r: work(f"invite {r}", f"invited {r}"), id=f"invite-{r}"
        )
        for r in RECIPIENTS
    ]
    await ctx.step.sleep("cooldown", "3d")
    return sent


WORKFLOWS = [newsletter, profile, reminder, notify, digest, invites, invites_wrong]
app = PushApp(WORKFLOWS)
# Only the safe changes of this module (the appended step, the patched explicit IDs), the
# other workflows as deploy_v1 has them: the gate passes it.
safe_app = PushApp(
    [
        deploy_v1.newsletter,
        deploy_v1.profile,
        deploy_v1.reminder,
        deploy_v1.notify,
        digest,
        invites,
        deploy_v1.invites_wrong,
    ]
)

# The gate's verdict on a run of each workflow in flight on deploy_v1's code.
EXPECTED = {
    "newsletter": "counter_shift",
    "profile": "new_step",
    "reminder": "nondeterminism",
    "notify": "counter_shift",
    "digest": None,
    "invites": None,
    "invites-wrong": "new_step",
}
