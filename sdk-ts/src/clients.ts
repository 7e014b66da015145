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
  input: unknown;
  output?: unknown;
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

  /** The run, with its steps. */
  getRun(runId: string): Promise<Run> {
    return this.request("GET", `/runs/${segment(runId)}`);
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

  /** A large value stored outside the run (`output`, or a step's `outputRef`). */
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

  /** `{ apps }`: the project's apps. */
  listApps(): Promise<{ apps: any[] }> {
    return this.request("GET", "/apps");
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

  listQueues(): Promise<{ queues: any[] }> {
    return this.request("GET", "/queues");
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

  listSubscriptions(): Promise<{ subscriptions: any[] }> {
    return this.request("GET", "/subscriptions");
  }

  deleteSubscription(subscriptionId: string): Promise<unknown> {
    return this.request("DELETE", `/subscriptions/${segment(subscriptionId)}`);
  }
}
