/**
 * The step API a workflow calls (`step.run`, `step.sleep`, ...).
 *
 * Each call validates its arguments at once (throwing `TypeError`/`RangeError`), then hands a
 * `StepRequest` to the invocation (`StepHost`), which assigns the step's ID and resolves it:
 * from the recorded steps, by running it, or by suspending the invocation. Steps called
 * together (`Promise.all`) are one round: unrecorded `run` steps in it run in parallel.
 */

import { clock, isoUtc } from "./clock.js";
import { MAX_SLEEP_SECONDS, durationSeconds, type Duration } from "./duration.js";
import { NondeterminismError, ValueRuleError, errorBody, type ErrorBody, type WorkflowRuleError } from "./errors.js";
import { patchStepId, validateExplicitId, validateName } from "./identity.js";
import { checkMessages, sendFn, type QueueSender } from "./queueSteps.js";
import type {
  Callback,
  CallbackOptions,
  Jsonify,
  QueueMessage,
  RunOptions,
  SentMessage,
  StepContext,
  WaitForMessageOptions,
} from "./types.js";
import { roundtrip } from "./values.js";
import type { Workflow } from "./workflow.js";

export type StepFn = (step: StepContext) => unknown;

/** What a step call asks for. `kind` is `run`, `sleep`, `value`, `callback`, `invoke` or
 * `message`. `wait` holds the fields of a wait entry (protocol: suspended.waits); `waitFor`
 * names an existing step to wait on (a callback's `wait()`); `reject` is an error to record
 * the step with at once (a sleep over a year). */
export interface StepRequest {
  kind: string;
  name: string;
  explicitId?: string;
  fn?: StepFn;
  retries?: number;
  wait?: Record<string, unknown>;
  makeValue?: () => unknown;
  timeoutSeconds?: number | null;
  waitFor?: string;
  reject?: ErrorBody;
}

/** The invocation, as the step API sees it. */
export interface StepHost {
  /** Register the step and wait for its outcome: `[step id, value]`. */
  submit(request: StepRequest): Promise<[string, unknown]>;
  /** Remember a rule violation (the run fails with it) and return it to throw. */
  violate(error: WorkflowRuleError): WorkflowRuleError;
  /** Whether the run's record holds steps (patch markers aside) the workflow has not asked
   * for yet: the run went past this point on other code. */
  historyContinues(): boolean;
}

const WORKFLOW_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const APP_REF = /^[A-Za-z0-9_-]{1,64}$/;
const MESSAGE_KEY = /^[A-Za-z0-9_.:-]{1,256}$/;
const MAX_MESSAGE_WAIT_SECONDS = 30 * 86_400;

function tooLong(what: string): ErrorBody {
  // A step error, not an exception at the call: the run goes on and may catch it.
  return errorBody("workflows.sleep_too_long", "SleepTooLongError", `${what} is longer than a year (365 days)`);
}

function checkTimeout(value: unknown, low: number, high: number, what: string): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "number" || !(value >= low && value <= high)) {
    throw new RangeError(`${what} must be a number of seconds from ${low} to ${high}`);
  }
  return Math.ceil(value);
}

function checkRetries(retries: unknown): number | undefined {
  if (retries === undefined) return undefined;
  if (typeof retries !== "number" || !Number.isInteger(retries) || retries < 0) {
    throw new RangeError(`retries must be an integer >= 0, got ${String(retries)}`);
  }
  return retries;
}

function checkJson(value: unknown, what: string): unknown {
  try {
    return roundtrip(value);
  } catch (error) {
    if (error instanceof ValueRuleError) throw new TypeError(`${what}: ${error.message}`);
    throw error;
  }
}

/** Attach a no-op handler, so a step promise nobody awaits never becomes an unhandled
 * rejection (which ends a Node process); whoever awaits it still sees the error. */
function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

/** Durable steps: every method returns a promise. */
export class Steps {
  private readonly patches = new Map<string, Promise<boolean>>();

  constructor(private readonly host: StepHost) {}

  /** Run `fn` at least once; its JSON result (a failure throws `StepError`, first run and
   * replay alike). `fn` gets the step's `{ stepId, attempt, idempotencyKey }`. */
  run<T>(name: string, fn: (step: StepContext) => T | Promise<T>, options: RunOptions = {}): Promise<Jsonify<Awaited<T>>> {
    if (typeof fn !== "function") throw new TypeError(`step ${JSON.stringify(name)}: fn must be a function`);
    const request: StepRequest = { kind: "run", name: validateName(name), fn, retries: checkRetries(options.retries) };
    if (options.id !== undefined) request.explicitId = validateExplicitId(options.id);
    return this.value(request) as Promise<Jsonify<Awaited<T>>>;
  }

  /** A durable timer: `"3d"`, `"1h30m"`, `"90s"`, or milliseconds; at most a year (a longer
   * one fails the step with `workflows.sleep_too_long`). */
  sleep(name: string, duration: Duration): Promise<void> {
    const seconds = durationSeconds(duration);
    const request: StepRequest = { kind: "sleep", name: validateName(name), wait: { seconds } };
    if (seconds > MAX_SLEEP_SECONDS) request.reject = tooLong(`sleep ${JSON.stringify(duration)}`);
    return this.none(request);
  }

  /** A durable timer until `at` (a `Date` or an ISO 8601 time), at most a year away. */
  sleepUntil(name: string, at: Date | string): Promise<void> {
    const when = typeof at === "string" ? new Date(at) : at;
    if (!(when instanceof Date) || Number.isNaN(when.getTime())) {
      throw new TypeError("sleepUntil needs a Date or an ISO 8601 time");
    }
    const until = isoUtc(when);
    const request: StepRequest = { kind: "sleep", name: validateName(name), wait: { until } };
    if (when.getTime() - clock.now().getTime() > MAX_SLEEP_SECONDS * 1000) request.reject = tooLong(`sleepUntil(${until})`);
    return this.none(request);
  }

  /** The current time, recorded once: the same `Date` on every replay. */
  now(name: string): Promise<Date> {
    const request: StepRequest = { kind: "value", name: validateName(name), makeValue: () => isoUtc(clock.now()) };
    return quiet(
      this.host.submit(request).then(([stepId, value]) => {
        const time = typeof value === "string" ? new Date(value) : undefined;
        if (!time || Number.isNaN(time.getTime())) throw this.mismatch(stepId, value, "a time (now)");
        return time;
      }),
    );
  }

  /** A random UUID string, recorded once: the same on every replay. */
  uuid(name: string): Promise<string> {
    const request: StepRequest = { kind: "value", name: validateName(name), makeValue: () => clock.newUuid() };
    return quiet(
      this.host.submit(request).then(([stepId, value]) => {
        if (typeof value !== "string") throw this.mismatch(stepId, value, "a UUID string (uuid)");
        return value;
      }),
    );
  }

  /** A step of kind `callback`: a `Callback` whose `url` anyone may POST a JSON body to (no
   * API key), and whose `wait()` gives that body, or `null` after `timeoutSeconds`. */
  createCallback<T = any>(name: string, options: CallbackOptions = {}): Promise<Callback<T>> {
    const timeoutSeconds = checkTimeout(options.timeoutSeconds, 1, MAX_SLEEP_SECONDS, "timeoutSeconds");
    const request: StepRequest = { kind: "callback", name: validateName(name), timeoutSeconds };
    return quiet(
      this.host.submit(request).then(([stepId, url]) => {
        if (typeof url !== "string") throw this.mismatch(stepId, url, "a callback URL");
        const wait = () => this.value({ kind: "callback", name: request.name, wait: {}, waitFor: stepId }) as Promise<T | null>;
        return { stepId, name: request.name, url, wait };
      }),
    );
  }

  /** Run a workflow of this app (or of `app`, another app of the project, by ID, slug or
   * name) as a child run and wait for its output. A child that failed, was cancelled or timed
   * out throws `StepError` here. */
  invoke<I, O>(name: string, options: { workflow: Workflow<I, O>; input?: I; app?: string }): Promise<Jsonify<Awaited<O>>>;
  invoke<O = any>(name: string, options: { workflow: string; input?: unknown; app?: string }): Promise<O>;
  invoke(name: string, options: { workflow: string | Workflow<any, any>; input?: unknown; app?: string }): Promise<unknown> {
    const workflowName = typeof options.workflow === "string" ? options.workflow : options.workflow?.name;
    if (typeof workflowName !== "string" || !WORKFLOW_NAME.test(workflowName)) {
      throw new RangeError(`invalid workflow name ${JSON.stringify(workflowName)}: must match ^[A-Za-z0-9_-]{1,64}$`);
    }
    const wait: Record<string, unknown> = { workflow: workflowName, input: checkJson(options.input, "input") };
    if (options.app !== undefined) {
      if (typeof options.app !== "string" || !APP_REF.test(options.app)) {
        throw new RangeError(`invalid app ${JSON.stringify(options.app)}: an app ID, slug or name`);
      }
      wait.app = options.app;
    }
    return this.value({ kind: "invoke", name: validateName(name), wait });
  }

  /** Wait for a message on `queueId` whose correlation value is `key`; the message, or `null`
   * after `timeoutSeconds` (1 s to 30 days). */
  waitForMessage(name: string, options: WaitForMessageOptions): Promise<QueueMessage | null> {
    const { queueId, key } = options;
    if (typeof queueId !== "string" || queueId.length < 1 || queueId.length > 256) {
      throw new TypeError("queueId must be a queue ID (a non-empty string)");
    }
    if (typeof key !== "string" || !MESSAGE_KEY.test(key)) {
      throw new RangeError(`invalid key ${JSON.stringify(key)}: must match ^[A-Za-z0-9_.:-]{1,256}$`);
    }
    if (options.timeoutSeconds === undefined) throw new TypeError("timeoutSeconds is required (1 s to 30 days)");
    const timeoutSeconds = checkTimeout(options.timeoutSeconds, 1, MAX_MESSAGE_WAIT_SECONDS, "timeoutSeconds");
    const wait = { queueId, key, timeoutSeconds };
    return this.value({ kind: "message", name: validateName(name), wait }) as Promise<QueueMessage | null>;
  }

  /** Send 1 to 10 messages to a queue as a step, exactly once; the recorded
   * `[{ messageId, seq? }]`. `queues` is a `QueuesClient`. */
  sendToQueue(name: string, queues: QueueSender, queueId: string, messages: unknown[]): Promise<SentMessage[]> {
    if (!queues || typeof queues.send !== "function") throw new TypeError("queues must be a QueuesClient");
    if (typeof queueId !== "string" || !queueId) throw new TypeError("queueId must be a queue ID (a non-empty string)");
    return this.run(name, sendFn(queues, queueId, checkMessages(messages))) as Promise<SentMessage[]>;
  }

  /**
   * Whether this run takes the new code path of patch `patchId`: change a workflow that has
   * runs in flight with `if (await step.patched("x")) { new } else { old }`.
   *
   * True for a run that reaches this point for the first time (a new run, or one whose record
   * ends before here); false for a run that went past it on the old code (its record holds
   * steps the workflow has not asked for yet). The answer is recorded as a `value` step with
   * the ID `patched:<patchId>`, so every replay takes the same path; later calls with the same
   * ID in the run answer the same. Once no run on the old path remains, remove the old path
   * and the call (docs/deploy.md, "Changing workflow code with runs in flight").
   */
  patched(patchId: string): Promise<boolean> {
    const stepId = patchStepId(patchId);
    const known = this.patches.get(patchId);
    if (known) return known;
    const host = this.host;
    const request: StepRequest = { kind: "value", name: stepId, explicitId: stepId, makeValue: () => !host.historyContinues() };
    const decided = quiet(
      host.submit(request).then(([, value]) => {
        if (typeof value !== "boolean") throw this.mismatch(stepId, value, "a patch decision (patched)");
        return value;
      }),
    );
    this.patches.set(patchId, decided);
    return decided;
  }

  private value(request: StepRequest): Promise<unknown> {
    return quiet(this.host.submit(request).then(([, value]) => value));
  }

  private none(request: StepRequest): Promise<void> {
    return quiet(this.host.submit(request).then(() => undefined));
  }

  private mismatch(stepId: string, value: unknown, wanted: string): WorkflowRuleError {
    return this.host.violate(
      new NondeterminismError(
        `step ${JSON.stringify(stepId)} recorded the value ${JSON.stringify(value)}, but the workflow now asks for ${wanted} at this step`,
      ),
    );
  }
}
