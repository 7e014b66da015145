/** `WorkflowsClient` and `QueuesClient`: thin wrappers of the HTTP API. */

import { ApiClient, segment, type ClientOptions } from "./api.js";
import { clock } from "./clock.js";
import { RUN_ENDED_STATUSES } from "./protocol/rules.js";
import type { OutgoingMessage, SentMessage } from "./types.js";

/** A run, as the API gives it. */
export interface Run {
  id: string;
  appId: string;
  workflow: string;
  status: "running" | "cancelling" | "completed" | "failed" | "cancelled" | "timedOut";
  input?: unknown;
  /** The input, when the answer gives it as a reference (`getPayload`). */
  inputRef?: string;
  output?: unknown;
  /** The output, when the answer gives it as a reference (`getPayload`). */
  outputRef?: string;
  error?: { code: string; name: string; message: string };
  runKey?: string;
  attempt: number;
  parentRunId?: string;
  scheduleId?: string;
  createdAt: string;
  startedAt: string;
  endedAt?: string;
  steps: Array<{
    id: string;
    name: string;
    kind: string;
    status: string;
    attempt: number;
    startedAt?: string;
    endedAt?: string;
    output?: unknown;
    outputRef?: string;
    error?: { code: string; name: string; message: string };
  }>;
}

export interface StartRunOptions {
  /** The app's ID (UUID) or slug. */
  appId: string;
  workflow: string;
  input?: unknown;
  /** Makes the start idempotent: the same key, workflow and input answer the existing run. */
  runKey?: string;
  /** The run's time limit (1 s to a year). */
  timeoutSeconds?: number;
}

export interface SearchRunsOptions {
  appId?: string;
  workflow?: string;
  status?: string;
  runKey?: string;
  createdAfter?: string | Date;
  createdBefore?: string | Date;
  limit?: number;
  cursor?: string;
}

function params(filters: object): Record<string, string | number | undefined> {
  const out: Record<string, string | number | undefined> = {};
  for (const [key, value] of Object.entries(filters)) {
    if (value === undefined || value === null) continue;
    out[key] = value instanceof Date ? value.toISOString() : (value as string | number);
  }
  return out;
}

/** EZGH Workflows API: apps and runs. Options fall back to `EZGH_API_KEY`, `EZGH_ORG_ID`,
 * `EZGH_PROJECT_ID` and `EZGH_API_URL`. Errors throw `ApiError`. */
export class WorkflowsClient extends ApiClient {
  constructor(options: ClientOptions = {}) {
    super(options);
  }

  /** Start a run: 201 a new run, or 200 the existing run of `runKey`. */
  startRun(options: StartRunOptions): Promise<Run> {
    const body: Record<string, unknown> = { appId: options.appId, workflow: options.workflow, input: options.input ?? null };
    if (options.runKey !== undefined) body.runKey = options.runKey;
    if (options.timeoutSeconds !== undefined) body.timeoutSeconds = options.timeoutSeconds;
    return this.request("POST", "/runs", { json: body, idempotencyKey: true });
  }

  /** The run, with all its steps. One answer holds what fits Lambda's 6 MB: a run whose steps
   * do not fit is read page by page (`stepsCursor`) and answered whole here. A value that did
   * not fit is a reference (`inputRef`, `outputRef`): `getPayload`. */
  async getRun(runId: string): Promise<Run> {
    const path = `/runs/${segment(runId)}`;
    const run = (await this.request("GET", path)) as Run & { nextStepsCursor?: string | null };
    let following = run.nextStepsCursor;
    delete run.nextStepsCursor;
    while (following) {
      const page = (await this.request("GET", path, { params: { stepsCursor: following } })) as Run & { nextStepsCursor?: string | null };
      run.steps = [...(run.steps ?? []), ...(page.steps ?? [])];
      following = page.nextStepsCursor;
    }
    return run;
  }

  /** `{ runs, nextCursor }`, newest first. */
  searchRuns(filters: SearchRunsOptions = {}): Promise<{ runs: Run[]; nextCursor: string | null }> {
    return this.request("GET", "/runs", { params: params(filters) });
  }

  /** Ask the run to cancel (202): `cancelling`, then `cancelled`. */
  cancelRun(runId: string): Promise<Run> {
    return this.request("POST", `/runs/${segment(runId)}/cancel`);
  }

  /** Run a `failed` or `timedOut` run again with `attempt` + 1, keeping its completed steps. */
  retryRun(runId: string): Promise<Run> {
    return this.request("POST", `/runs/${segment(runId)}/retry`);
  }

  /** `{ events, nextCursor }`: the run's invocations and step outcomes, in order. */
  listRunEvents(runId: string, options: { cursor?: string; limit?: number } = {}): Promise<{ events: unknown[]; nextCursor: string | null }> {
    return this.request("GET", `/runs/${segment(runId)}/events`, { params: params(options) });
  }

  /** A value an answer gave as a reference: a run's `inputRef` or `outputRef`, or a step's
   * `outputRef` (a value kept outside the run, or one an answer had no room for). */
  getPayload(runId: string, path: string): Promise<unknown> {
    // An outputRef is already percent-encoded: keep its escapes as they are.
    const encoded = path.split("/").map((part) => encodeURIComponent(decodeURIComponentSafe(part))).join("/");
    return this.request("GET", `/runs/${segment(runId)}/payloads/${encoded}`);
  }

  /** Delete an ended run (frees its `runKey`). */
  deleteRun(runId: string): Promise<unknown> {
    return this.request("DELETE", `/runs/${segment(runId)}`);
  }

  /** Poll `getRun` until the run has ended; a `TimeoutError` after `timeoutSeconds`. */
  async waitForRun(runId: string, options: { timeoutSeconds?: number; intervalSeconds?: number } = {}): Promise<Run> {
    const deadline = clock.monotonic() + (options.timeoutSeconds ?? 300);
    for (;;) {
      const run = await this.getRun(runId);
      if (RUN_ENDED_STATUSES.has(run.status)) return run;
      if (clock.monotonic() >= deadline) {
        throw new DOMException(`run ${runId} has not ended after ${options.timeoutSeconds ?? 300} seconds`, "TimeoutError");
      }
      await clock.sleep((options.intervalSeconds ?? 1) * 1000);
    }
  }

  /** Create an app (`push` or `pull`); the answer has its `signingKey` (this answer only). */
  createApp(options: { name: string; kind: "push" | "pull"; url?: string }): Promise<any> {
    return this.request("POST", "/apps", { json: options, idempotencyKey: true });
  }

  /** An app, by UUID, slug or name. */
  getApp(appId: string): Promise<any> {
    return this.request("GET", `/apps/${segment(appId)}`);
  }

  /** `{ apps }`: every app of the project (read page by page when one answer does not hold
   * them all). */
  listApps(): Promise<{ apps: any[] }> {
    return allPages(this, "/apps", "apps");
  }

  /** Update `url` and/or `notifications` (`null` clears them). */
  updateApp(appId: string, fields: { url?: string; notifications?: unknown }): Promise<any> {
    return this.request("PATCH", `/apps/${segment(appId)}`, { json: fields });
  }

  /** Have the engine call a push app to learn its workflows. */
  syncApp(appId: string): Promise<any> {
    return this.request("POST", `/apps/${segment(appId)}/sync`);
  }

  /** Delete an app. */
  deleteApp(appId: string): Promise<unknown> {
    return this.request("DELETE", `/apps/${segment(appId)}`);
  }
}

/** `{ [name]: [...] }`: a list the API answers page by page (`nextCursor`), whole. */
async function allPages<N extends string>(client: ApiClient, path: string, name: N): Promise<{ [K in N]: any[] }> {
  const found: any[] = [];
  let cursor: string | undefined;
  do {
    const page = (await client.request("GET", path, cursor ? { params: { cursor } } : {})) as Record<string, unknown>;
    found.push(...((page?.[name] as any[] | undefined) ?? []));
    cursor = typeof page?.nextCursor === "string" && page.nextCursor ? page.nextCursor : undefined;
  } while (cursor);
  return { [name]: found } as { [K in N]: any[] };
}

function decodeURIComponentSafe(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

/** A subscription target: an HTTPS endpoint, or a workflow started or resumed per message. */
export type SubscriptionTarget =
  | { kind: "https"; url: string }
  | { kind: "workflow"; mode: "start" | "resume"; appId: string; workflow: string; correlationAttribute?: string };

/** EZGH Queues API. Same options and fallbacks as `WorkflowsClient`. */
export class QueuesClient extends ApiClient {
  constructor(options: ClientOptions = {}) {
    super(options);
  }

  /** Send 1 to 10 messages to a queue; `{ messages: [{ messageId, seq? }] }`. 429 (except
   * `quota_exceeded`), 5xx and network errors are sent again after `Retry-After`, up to 3
   * times, with the same Idempotency-Key (`idempotencyKey`, or one made for this call). */
  send(queueId: string, messages: OutgoingMessage[], options: { idempotencyKey?: string } = {}): Promise<{ messages: SentMessage[] }> {
    if (!Array.isArray(messages) || messages.length < 1 || messages.length > 10) {
      throw new RangeError("send 1 to 10 messages at a time");
    }
    return this.request("POST", `/queues/${segment(queueId)}/messages`, {
      json: { messages },
      idempotencyKey: options.idempotencyKey ?? true,
    });
  }

  /** Create a queue; the answer has its `id` (a UUID). */
  createQueue(options: { name: string; fifo?: boolean; maxReceiveCount?: number; visibilityTimeoutSeconds?: number }): Promise<any> {
    return this.request("POST", "/queues", { json: options, idempotencyKey: true });
  }

  getQueue(queueId: string): Promise<any> {
    return this.request("GET", `/queues/${segment(queueId)}`);
  }

  /** `{ queues }`: every queue of the project (page by page, whole). */
  listQueues(): Promise<{ queues: any[] }> {
    return allPages(this, "/queues", "queues");
  }

  deleteQueue(queueId: string): Promise<unknown> {
    return this.request("DELETE", `/queues/${segment(queueId)}`);
  }

  /** Move the dead-letter queue's messages back. */
  redrive(queueId: string): Promise<any> {
    return this.request("POST", `/queues/${segment(queueId)}/redrive`);
  }

  /** Subscribe a target to a queue. */
  createSubscription(options: { queueId: string; target: SubscriptionTarget; maxConcurrency?: number }): Promise<any> {
    return this.request("POST", "/subscriptions", { json: options, idempotencyKey: true });
  }

  getSubscription(subscriptionId: string): Promise<any> {
    return this.request("GET", `/subscriptions/${segment(subscriptionId)}`);
  }

  /** `{ subscriptions }`: every subscription of the project (page by page, whole). */
  listSubscriptions(): Promise<{ subscriptions: any[] }> {
    return allPages(this, "/subscriptions", "subscriptions");
  }

  deleteSubscription(subscriptionId: string): Promise<unknown> {
    return this.request("DELETE", `/subscriptions/${segment(subscriptionId)}`);
  }
}
