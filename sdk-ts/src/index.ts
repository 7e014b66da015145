/**
 * EZGH Workflows and EZGH Queues: the TypeScript SDK.
 *
 * ```ts
 * import { PushApp, workflow } from "@ezgh/workflows"
 *
 * export const onboarding = workflow("onboarding", async ({ input, step }) => {
 *   const user = await step.run("load-user", () => db.users.get(input.userId))
 *   await step.sleep("cooldown", "3d")
 *   return step.run("follow-up", () => email.send(user.email, "How is it going?"))
 * })
 *
 * const app = new PushApp([onboarding])
 * export default { fetch: app.fetch }          // or app.nodeHandler, app.lambdaHandler
 * ```
 */

export { ApiError, type ClientOptions } from "./api.js";
export {
  QueuesClient,
  WorkflowsClient,
  type Run,
  type SearchRunsOptions,
  type StartRunOptions,
  type SubscriptionTarget,
} from "./clients.js";
export { detectDeploymentId } from "./deployment.js";
export type { Duration } from "./duration.js";
export {
  DuplicateStepNameError,
  InvalidValueError,
  NonRetryableError,
  NondeterminismError,
  OutputTooLargeError,
  RunCancelledError,
  StepError,
  StepInStepError,
  UnknownWorkflowError,
  ValueRuleError,
  WorkflowRuleError,
  type ErrorBody,
} from "./errors.js";
export { PROTOCOL_VERSION, SDK_NAME, SDK_VERSION } from "./protocol/wire.js";
export {
  PushApp,
  type HttpRequest,
  type HttpResponse,
  type LambdaHttpEvent,
  type LambdaHttpResult,
  type PushAppOptions,
} from "./pushApp.js";
export { QueueSendError, type QueueSender } from "./queueSteps.js";
export { Steps } from "./steps.js";
export type {
  Callback,
  CallbackOptions,
  Jsonify,
  OutgoingMessage,
  QueueMessage,
  RunOptions,
  SentMessage,
  StepContext,
  WaitForMessageOptions,
} from "./types.js";
export type { JsonValue } from "./values.js";
export { Worker, type WorkerOptions } from "./worker.js";
export { workflow, type Context, type Workflow, type WorkflowFn } from "./workflow.js";
