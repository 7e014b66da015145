// The push app serving every example.
import { PushApp } from "@ezgh/workflows"

import { approval } from "./approval.js"
import { charge, checkout } from "./checkout.js"
import { onboarding } from "./onboarding.js"
import { order } from "./order.js"

export const workflows = [onboarding, order, checkout, charge, approval]

export const app = new PushApp(workflows)
