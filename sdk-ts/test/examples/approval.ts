// A callback (`step.createCallback`), with the `now` and `uuid` value steps.
import { workflow } from "@ezgh/workflows"

import { email } from "./services.js"

export const approval = workflow("approval", async ({ input, step }) => {
  const requestId = await step.uuid("request-id")
  const askedAt = await step.now("asked-at")
  const callback = await step.createCallback("approve", { timeoutSeconds: 86_400 })
  await step.run("ask", () => email.send(input.approver, `Approve ${requestId}: POST to ${callback.url}`))
  const decision = await callback.wait()
  return { requestId, askedAt: askedAt.toISOString(), approved: decision?.approved ?? false }
})
