// Seed docs, "Queues and Workflows": the order workflow, which waits for its payment with
// waitForMessage, and sends a notification with sendToQueue (the docs' two snippets, as one).
import { QueuesClient, workflow } from "@ezgh/workflows"

import { shop } from "./services.js"

const queues = new QueuesClient({
  apiKey: process.env.EZGH_API_KEY!,
  organizationId: process.env.EZGH_ORG_ID!,
  projectId: process.env.EZGH_PROJECT_ID!,
})

export const order = workflow("order", async ({ input, step }) => {
  const placed = await step.run("place", () => shop.place(input))
  await step.sendToQueue("notify", queues, process.env.ORDERS_QUEUE_ID!, [
    { body: JSON.stringify(placed), attributes: { orderId: placed.id } },
  ])
  const paid = await step.waitForMessage("paid", {
    queueId: process.env.PAYMENTS_QUEUE_ID!,
    key: `order:${input.orderId}`,
    timeoutSeconds: 86_400,
  })
  if (paid === null) return step.run("cancel-order", () => shop.cancel(input.orderId))
  await step.run("ship", () => shop.ship(input.orderId, JSON.parse(paid.body)))
})
