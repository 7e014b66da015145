// A child workflow (seed docs' primitive `step.invoke(name, { workflow, input })`), and
// parallel steps awaited together with Promise.all.
import { workflow } from "@ezgh/workflows"

import { db, payments } from "./services.js"

export const charge = workflow("charge", async ({ input, step }) => {
  return step.run("charge-card", () => payments.charge(input.customerId, input.amount))
})

export const checkout = workflow("checkout", async ({ input, step }) => {
  const [customer, prices] = await Promise.all([
    step.run("load-customer", () => db.users.get(input.customerId)),
    step.run("load-prices", () => input.items.map((item: { price: number }) => item.price)),
  ])
  const amount = prices.reduce((sum: number, price: number) => sum + price, 0)
  const receipt = await step.invoke("charge", { workflow: charge, input: { customerId: customer.id, amount } })
  return { customer: customer.email, amount, chargeId: receipt.chargeId }
})
