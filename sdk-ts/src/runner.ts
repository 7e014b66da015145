/**
 * Resolving one step inline: run a `run` step's function, record a `value` step, create a
 * callback, cancel or reject a step. Each gives a `Resolution` (a value or an error), which the
 * driver hands to the waiting step call once the whole round is resolved.
 */

import { NonRetryableError, RunCancelledError, StepError, ValueRuleError, errorBody, errorMessage, errorName } from "./errors.js";
import { DEFAULT_RETRIES, STEP_ENDED_STATUSES, mayRetry } from "./protocol/rules.js";
import { ops, type RecordedStep } from "./protocol/wire.js";
import type { StepCalls } from "./stepCalls.js";
import type { StepRequest } from "./steps.js";
import type { StepContext } from "./types.js";
import { roundtrip } from "./values.js";

export interface Resolution {
  value?: unknown;
  error?: StepError | RunCancelledError;
  /** The engine runs the step again then (status `retrying`): the call stays pending. */
  retryAt?: string;
}

export function fromRecord(recorded: RecordedStep): Resolution {
  if (recorded.status === "completed") return { value: recorded.output };
  if (recorded.status === "cancelled") {
    return { error: new RunCancelledError(recorded.error?.message || "the run was cancelled") };
  }
  const body = recorded.error ?? {
    code: `workflows.step_${recorded.status}`,
    name: "StepError",
    message: `step ${JSON.stringify(recorded.id)} is ${recorded.status}`,
  };
  return { error: StepError.fromBody(recorded.id, body) };
}

/** A `now`/`uuid` step: record a fresh value, or use the one already recorded. Sent at once,
 * never held: the workflow must not see a value the run may never hold. */
export async function recordValue(calls: StepCalls, stepId: string, request: StepRequest): Promise<Resolution> {
  const value = request.makeValue!();
  const [result] = await calls.send([ops.record(stepId, request.name, value)]);
  const recorded = await calls.recorded(result);
  return recorded ? fromRecord(recorded) : { value };
}

/** A `callback` step: the engine records it `waiting` and answers its URL. */
export async function createCallback(calls: StepCalls, stepId: string, request: StepRequest): Promise<Resolution> {
  const [result] = await calls.send([ops.callback(stepId, request.name, request.timeoutSeconds ?? null)]);
  const recorded = await calls.recorded(result);
  return { value: recorded ? recorded.url : result?.url };
}

/** In a cancelling run: record the step `cancelled` (or use what ended it first). */
export async function cancelStep(calls: StepCalls, stepId: string, request: StepRequest): Promise<Resolution> {
  const [result] = await calls.send([ops.cancel(stepId, request.name, request.kind)]);
  const recorded = await calls.recorded(result);
  if (recorded && STEP_ENDED_STATUSES.has(recorded.status)) return fromRecord(recorded);
  return { error: new RunCancelledError() };
}

/** Record a step that can't be (a sleep over a year) as failed, with its error. */
export async function rejectStep(calls: StepCalls, stepId: string, request: StepRequest): Promise<Resolution> {
  const [result] = await calls.send([ops.reject(stepId, request.name, request.kind, request.reject!)]);
  const recorded = await calls.recorded(result);
  return recorded ? fromRecord(recorded) : { error: StepError.fromBody(stepId, request.reject) };
}

/** Where a step's function runs: the invocation marks it, so a step called from inside it is
 * refused, and a rule broken meanwhile wins over the step's outcome. */
export interface StepRunScope {
  enter(stepId: string): void;
  leave(): void;
  /** Throws the rule violation the step's function caused, if any. */
  checkViolation(): void;
}

/** A `run` step: `start` (with the attempt it expects, from `recorded`), run the function,
 * then its end: held for the next call when final, sent now when the engine must say whether
 * it retries. */
export async function runStep(
  calls: StepCalls,
  scope: StepRunScope,
  runId: string,
  stepId: string,
  request: StepRequest,
  recorded: RecordedStep | undefined,
  startedAttempt?: number,
): Promise<Resolution> {
  let attempt: number;
  let inline: unknown;
  if (startedAttempt === undefined) {
    const expected = recorded ? recorded.attempt + 1 : 1;
    const [started] = await calls.send([ops.start(stepId, request.name, expected)]);
    const already = await calls.recorded(started);
    if (already) return fromRecord(already);
    attempt = typeof started?.attempt === "number" && started.attempt ? started.attempt : 1;
    // Started inline (with the previous step's end): its end echoes what the start said.
    inline = started?.inline;
  } else {
    attempt = startedAttempt; // a branch's step the engine started: its end rides the answer
  }
  const context: StepContext = Object.freeze({ stepId, attempt, idempotencyKey: await idempotencyKey(runId, stepId) });
  const [outcome, retryable] = await call(request, context, scope);
  let result: Record<string, unknown> | undefined;
  if (!outcome.error) {
    result = await calls.end(ops.complete(stepId, outcome.value, inline));
  } else {
    const retries = request.retries ?? DEFAULT_RETRIES;
    const op = ops.fail(stepId, (outcome.error as StepError).toBody(), retryable ? { attempt, retries } : undefined);
    if (inline !== undefined && inline !== null) op.inline = inline;
    // The engine must say whether it retries, unless the invocation ends with this step.
    const retried = startedAttempt === undefined && Boolean(op.retryable) && mayRetry(attempt, retries);
    result = retried ? (await calls.send([op]))[0] : await calls.end(op);
  }
  if (result === undefined) return outcome;
  const ended = await calls.recorded(result);
  if (ended) return fromRecord(ended);
  if (result.result === "retry") return { retryAt: String(result.retryAt ?? "") || "pending" };
  return outcome;
}

/** The function's outcome, and whether a failure may be retried. */
async function call(request: StepRequest, context: StepContext, scope: StepRunScope): Promise<[Resolution, boolean]> {
  let raw: unknown;
  scope.enter(context.stepId);
  try {
    raw = await request.fn!(context);
  } catch (error) {
    scope.checkViolation();
    if (error instanceof ValueRuleError) return [{ error: StepError.fromBody(context.stepId, error.toBody()) }, false];
    // As it is recorded (its message cut as `errorBody` cuts it): the same on the first run
    // and on replay.
    const failed = StepError.fromBody(context.stepId, errorBody("user", errorName(error), errorMessage(error)));
    return [{ error: failed }, !(error instanceof NonRetryableError)];
  } finally {
    scope.leave();
  }
  scope.checkViolation();
  try {
    return [{ value: roundtrip(raw) }, false];
  } catch (error) {
    if (error instanceof ValueRuleError) return [{ error: StepError.fromBody(context.stepId, error.toBody()) }, false];
    throw error;
  }
}

const encoder = new TextEncoder();

/** Hex SHA-256 of `<runId>:<stepId>`: the step's idempotency key, the same on every attempt. */
export async function idempotencyKey(runId: string, stepId: string): Promise<string> {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", encoder.encode(`${runId}:${stepId}`));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}
