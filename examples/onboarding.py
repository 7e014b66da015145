"""The onboarding workflow of the docs (Steps and determinism), as a push app.

Serve it with the local engine:  ezgh dev --app examples.onboarding:app
The cooldown is three days, as in the docs; set ONBOARDING_COOLDOWN (e.g. "5s") to watch a
run finish while you wait.
"""

from __future__ import annotations

import os

from ezgh_workflows import Context, PushApp, workflow

# Stand-ins for a real user database and mailer, so the example runs anywhere.
USERS = {"u_42": {"id": "u_42", "email": "ada@example.com", "name": "Ada"}}
SENT: list[tuple[str, str]] = []


def load_user(user_id: str) -> dict[str, str]:
    return USERS.get(user_id, {"id": user_id, "email": f"{user_id}@example.com", "name": user_id})


def send_email(to: str, text: str) -> dict[str, str]:
    SENT.append((to, text))
    print(f"  [mailer] to {to}: {text}", flush=True)
    return {"to": to, "text": text}


@workflow("onboarding")
async def onboarding(ctx: Context) -> dict[str, str]:
    user = await ctx.step.run("load-user", lambda: load_user(ctx.input["userId"]))
    await ctx.step.run("welcome-email", lambda: send_email(user["email"], "Welcome!"))
    await ctx.step.sleep("cooldown", os.environ.get("ONBOARDING_COOLDOWN", "3d"))
    return await ctx.step.run("follow-up", lambda: send_email(user["email"], "How is it going?"))


app = PushApp([onboarding])
