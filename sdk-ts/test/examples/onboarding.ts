// Seed docs, "Steps and determinism": the onboarding workflow, as written there.
import { workflow } from "@ezgh/workflows"

import { db, email } from "./services.js"

export const onboarding = workflow("onboarding", async ({ input, step }) => {
  const user = await step.run("load-user", () => db.users.get(input.userId))
  await step.run("welcome-email", () => email.send(user.email, "Welcome!"))
  await step.sleep("cooldown", "3d")
  return step.run("follow-up", () => email.send(user.email, "How is it going?"))
})
