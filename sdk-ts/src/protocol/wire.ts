/**
 * Wire shapes of the invocation protocol 1.5 (docs/protocol.md): invoke requests, outcomes,
 * ops, history pages.
 *
 * From 1.5 a request has a size of its own: a value kept outside the run's items arrives as a
 * reference (`run.inputRef`, a step's `outputRef`) and a history too long for one request as
 * the steps not ended plus a `stepsCursor`. Parsing keeps them as they came; the driver reads
 * the pages before the workflow runs and each value when the workflow reaches it
 * (`transport.ts`, `payloadCache.ts`).
 */

import type { ErrorBody } from "../errors.js";
import { THROTTLED_OUTCOME } from "./rules.js";

export const PROTOCOL_VERSION = "1.5";
/** From 1.3 an invocation's answer may carry `ops`: the step ends held since its last call. */
const HELD_ENDS_SINCE = [1, 3];
export const SDK_VERSION = "0.3.0";
export const SDK_NAME = `ezgh-workflows-typescript/${SDK_VERSION}`;

export type Json = unknown;
export type Op = Record<string, unknown>;
export type Answer = Record<string, unknown>;

/** A request or an answer does not have the protocol's shape. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** A step the engine recorded, as sent in an invoke request or a `recorded` result. */
export interface RecordedStep {
  id: string;
  name: string;
  kind: string;
  status: string;
  attempt: number;
  output: Json;
  error: ErrorBody | undefined;
  /** A pending retry's or a wait's wake time; a `retrying` step without one is due. */
  wakeAt: string | undefined;
  endedAt: string | undefined;
  /** Run by a branch invocation of its own (parallel steps): never run inline. */
  branch: boolean;
  /** A callback step's URL. */
  url: string | undefined;
  /** 1.5: an output kept outside the run's items, read with the payload call when the
   * workflow reaches the step (`output` is then null). */
  outputRef: string | undefined;
}

export function isPendingRetry(step: RecordedStep): boolean {
  return step.status === "retrying" && step.wakeAt !== undefined;
}

export interface RunInfo {
  id: string;
  appId: string;
  workflow: string;
  input: Json;
  attempt: number;
  status: string;
  /** 1.5: an input kept outside the run's item, read with the payload call before the
   * workflow starts (`input` is then null). */
  inputRef: string | undefined;
}

export interface ApiInfo {
  url: string;
  token: string;
}

export interface InvokeRequest {
  invocationId: string;
  run: RunInfo;
  steps: RecordedStep[];
  api: ApiInfo;
  /** A branch invocation runs only this step (parallel steps), then answers `branch`. */
  branchStepId: string | undefined;
  /** The attempt of that step the engine started already (its lease take did: `branch.attempt`):
   * no `start`, and the step's end rides the answer's `ops`. Undefined: the SDK starts it. */
  branchAttempt?: number | undefined;
  /** The protocol version the engine speaks (the request's `protocol`). */
  protocol: string;
  /** How long the engine waits for this request's answer (absent for a pull task). */
  answerWithinSeconds: number | undefined;
  /** 1.5: the history did not fit the request: `steps` lists the steps not ended (or none),
   * and this cursor opens the rest, page by page (the history call). */
  stepsCursor: string | undefined;
}

/** Whether step ends may be held for the next call or the answer (1.3 and later; in a branch
 * invocation only when the engine started its step: its answer then carries the end, else the
 * step call does, as the end resumes the run). */
export function holdsStepEnds(request: InvokeRequest): boolean {
  if (request.branchStepId !== undefined && request.branchAttempt === undefined) return false;
  return versionAtLeast(request.protocol, HELD_ENDS_SINCE);
}

function versionAtLeast(version: string, wanted: number[]): boolean {
  const parts = version.split(".").map((p) => (/^\d+$/.test(p) ? Number(p) : NaN));
  if (parts.some(Number.isNaN)) return false;
  for (let i = 0; i < wanted.length; i++) {
    const have = parts[i] ?? 0;
    if (have !== wanted[i]) return have > wanted[i]!;
  }
  return true;
}

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function field(body: unknown, key: string, kind: "string" | "object", where: string): any {
  if (!isObject(body)) throw new ProtocolError(`${where} must be an object`);
  const value = body[key];
  const ok = kind === "object" ? isObject(value) : typeof value === kind;
  if (!ok) throw new ProtocolError(`${where}.${key} is missing or has the wrong type`);
  return value;
}

function optString(body: Obj, key: string): string | undefined {
  const value = body[key];
  return typeof value === "string" ? value : undefined;
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value !== 0 ? Math.trunc(value) : 1;
}

export function parseRecordedStep(body: unknown, where = "step"): RecordedStep {
  const id = field(body, "id", "string", where) as string;
  const b = body as Obj;
  return {
    id,
    name: field(b, "name", "string", where),
    kind: field(b, "kind", "string", where),
    status: field(b, "status", "string", where),
    attempt: count(b.attempt),
    output: b.output ?? null,
    error: isObject(b.error) ? (b.error as unknown as ErrorBody) : undefined,
    wakeAt: optString(b, "wakeAt"),
    endedAt: optString(b, "endedAt"),
    branch: Boolean(b.branch),
    url: optString(b, "url"),
    outputRef: optString(b, "outputRef"),
  };
}

/** Parse an `invoke` request (1.2 to 1.5); `ProtocolError` when its shape is wrong. */
export function parseInvoke(body: unknown): InvokeRequest {
  const run = field(body, "run", "object", "request") as Obj;
  const api = field(body, "api", "object", "request") as Obj;
  const b = body as Obj;
  const steps = b.steps ?? [];
  if (!Array.isArray(steps)) throw new ProtocolError("request.steps must be a list");
  const within = b.answerWithinSeconds;
  let branchStepId: string | undefined;
  let branchAttempt: number | undefined;
  if (b.branch !== undefined && b.branch !== null) {
    branchStepId = field(b.branch, "stepId", "string", "branch");
    // An unreadable value counts as not started (the SDK then starts the step itself).
    const attempt = (b.branch as Obj).attempt;
    if (typeof attempt === "number" && Number.isInteger(attempt) && attempt >= 1) branchAttempt = attempt;
  }
  return {
    invocationId: String(b.invocationId ?? ""),
    run: {
      id: field(run, "id", "string", "run"),
      appId: String(run.appId ?? ""),
      workflow: field(run, "workflow", "string", "run"),
      input: run.input ?? null,
      attempt: count(run.attempt),
      status: String(run.status || "running"),
      inputRef: optString(run, "inputRef"),
    },
    steps: steps.map((s, i) => parseRecordedStep(s, `steps[${i}]`)),
    api: { url: field(api, "url", "string", "api"), token: field(api, "token", "string", "api") },
    branchStepId,
    branchAttempt,
    protocol: String(b.protocol || "1.2"),
    answerWithinSeconds: typeof within === "number" && within > 0 ? within : undefined,
    stepsCursor: optString(b, "stepsCursor"),
  };
}

/** A page of the history call's answer (1.5). */
export interface HistoryPage {
  steps: RecordedStep[];
  nextCursor: string | undefined;
}

/** Parse a history call's answer: its steps and the cursor of the next page, if any. */
export function parseHistoryPage(body: unknown): HistoryPage {
  const steps = isObject(body) ? body.steps : undefined;
  if (!Array.isArray(steps)) throw new ProtocolError("a history page has no list of steps");
  return {
    steps: steps.map((s, i) => parseRecordedStep(s, `history.steps[${i}]`)),
    nextCursor: optString(body as Obj, "nextCursor"),
  };
}

export function syncAnswer(workflowNames: string[], deploymentId: string | null): Answer {
  return {
    protocol: PROTOCOL_VERSION,
    sdk: SDK_NAME,
    deploymentId,
    workflows: workflowNames.map((name) => ({ name })),
  };
}

function outcome(kind: string, deploymentId: string | null, fields: Obj = {}): Answer {
  return { protocol: PROTOCOL_VERSION, deploymentId, outcome: kind, ...fields };
}

export const answers = {
  completed: (output: Json, deploymentId: string | null) => outcome("completed", deploymentId, { output }),
  failed: (error: ErrorBody, deploymentId: string | null) => outcome("failed", deploymentId, { error }),
  suspended: (waits: Obj[], deploymentId: string | null) => outcome("suspended", deploymentId, { waits }),
  aborted: (reason: string, deploymentId: string | null) => outcome("aborted", deploymentId, { reason }),
  throttled: (reason: string, retryAfter: number | null, deploymentId: string | null) =>
    outcome(THROTTLED_OUTCOME, deploymentId, { reason, retryAfter }),
  branchEnded: (stepId: string, deploymentId: string | null) => outcome("branch", deploymentId, { stepId }),
  cancelled: (deploymentId: string | null) => outcome("cancelled", deploymentId),
};

/** The answer with the step ends held since the last step call (1.3), if any. */
export function withOps(answer: Answer, ops: Op[]): Answer {
  return ops.length ? { ...answer, ops } : answer;
}

export const ops = {
  /** Start a run step; `attempt` is the attempt the SDK expects to start. */
  start(stepId: string, name: string, attempt: number): Op {
    return { op: "start", stepId, name, kind: "run", attempt };
  },
  /** End a run step with its output; `inline` echoes what its start answered. */
  complete(stepId: string, output: Json, inline?: unknown): Op {
    const op: Op = { op: "complete", stepId, output };
    if (inline !== undefined && inline !== null) op.inline = inline;
    return op;
  },
  fail(stepId: string, error: ErrorBody, retry?: { attempt: number; retries: number }): Op {
    const op: Op = { op: "fail", stepId, error };
    if (retry && retry.retries > 0) Object.assign(op, { retryable: true, attempt: retry.attempt, retries: retry.retries });
    return op;
  },
  callback(stepId: string, name: string, timeoutSeconds: number | null): Op {
    return { op: "callback", stepId, name, timeoutSeconds };
  },
  /** Record a wait step (a sleep over a year) as failed at once. */
  reject(stepId: string, name: string, kind: string, error: ErrorBody): Op {
    return { op: "reject", stepId, name, kind, error };
  },
  record(stepId: string, name: string, output: Json): Op {
    return { op: "record", stepId, name, kind: "value", output };
  },
  cancel(stepId: string, name: string, kind: string): Op {
    return { op: "cancel", stepId, name, kind };
  },
};

/** The recorded step of a `recorded` op result; undefined for `started`/`ok`/`retry`. */
export function recordedIn(result: unknown): RecordedStep | undefined {
  if (!isObject(result) || !("result" in result)) throw new ProtocolError("a step call result has no 'result'");
  if (result.result !== "recorded") return undefined;
  return parseRecordedStep(result.step, "result.step");
}
