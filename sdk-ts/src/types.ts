/** Types a workflow's code sees. */

/** What a value becomes after it passed through JSON: a `Date` a string, `undefined` null. */
export type Jsonify<T> = 0 extends 1 & T ? any : unknown extends T ? unknown : JsonifyInner<T>;

type JsonifyInner<T> = T extends Date
  ? string
  : T extends string | number | boolean | null
    ? T
    : T extends undefined | void
      ? null
      : T extends { toJSON(): infer J }
        ? Jsonify<J>
        : T extends ((...args: never[]) => unknown) | symbol | bigint
          ? never
          : T extends ReadonlyArray<infer U>
            ? Jsonify<U>[]
            : T extends object
              ? { [K in keyof T]: Jsonify<Exclude<T[K], undefined>> }
              : never;

/** What a step's function learns about its step. */
export interface StepContext {
  /** The step's ID (`<name>#<n>`, or its explicit ID). */
  readonly stepId: string;
  /** The attempt, from 1. */
  readonly attempt: number;
  /** The same on every attempt of the step (hex SHA-256 of `<runId>:<stepId>`): pass it to the
   * systems the step calls, so a retried attempt does not repeat their effect. */
  readonly idempotencyKey: string;
}

export interface RunOptions {
  /** An explicit step ID (`^[A-Za-z0-9._:-]{1,128}$`), naming this one step for the whole run. */
  id?: string;
  /** How many times a failed attempt is retried (default 3: four attempts); 0 never retries. */
  retries?: number;
}

export interface CallbackOptions {
  /** Seconds (1 to a year) after which `wait()` gives `null`; no timeout by default. */
  timeoutSeconds?: number;
}

export interface WaitForMessageOptions {
  /** The queue's ID (a UUID). */
  queueId: string;
  /** 1 to 256 of `A-Z a-z 0-9 _ . : -`, e.g. `order:1042`. */
  key: string;
  /** 1 second to 30 days; then the step completes with `null`. */
  timeoutSeconds: number;
}

/** A message as `waitForMessage` gives it (and as a `start` subscription's run input). */
export interface QueueMessage {
  messageId: string;
  body: string;
  attributes: Record<string, string>;
  sentAt: string;
  queueId: string;
  /** FIFO queues only. */
  groupId?: string;
  /** FIFO queues only. */
  seq?: string;
}

/** A message to send: `{ body, attributes?, groupId?, dedupId? }`. */
export interface OutgoingMessage {
  body: string;
  attributes?: Record<string, string>;
  groupId?: string;
  dedupId?: string;
}

/** What sending answers, one entry per message. */
export interface SentMessage {
  messageId: string;
  seq?: string;
}

/** A callback step's handle: its `url`, and `wait()` for the JSON body POSTed there. */
export interface Callback<T = any> {
  readonly stepId: string;
  readonly name: string;
  readonly url: string;
  /** The body POSTed to `url`, or `null` when the callback timed out. */
  wait(): Promise<T | null>;
}
