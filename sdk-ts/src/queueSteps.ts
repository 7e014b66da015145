/**
 * `sendToQueue`: sending messages to an EZGH queue as a step, exactly once (seed docs,
 * "Send messages from a workflow").
 *
 * The step is a `run` step whose function calls `queues.send(...)` with the Idempotency-Key
 * `wfq_<hex SHA-256 of "<runId>:<stepId>">`, the same on every attempt, so a resend after a
 * crash gets the first answer instead of storing a second copy. A FIFO message (one with a
 * `groupId`) without its own `dedupId` gets `<hex>:<index>`. A 4xx from Queues (a bad message,
 * a missing queue, a refused permission) fails the step at once, without retries, except
 * `409 idempotency_conflict` "still in progress" (an earlier attempt's send has not answered
 * yet), which the step's retries cover; the client itself resends 429 (not `quota_exceeded`),
 * 5xx and network errors.
 */

import { ApiError } from "./api.js";
import { NonRetryableError } from "./errors.js";
import type { OutgoingMessage, SentMessage, StepContext } from "./types.js";

export const MAX_MESSAGES = 10;

/** What `sendToQueue` needs of a `QueuesClient`. */
export interface QueueSender {
  send(queueId: string, messages: OutgoingMessage[], options?: { idempotencyKey?: string }): Promise<{ messages: SentMessage[] }>;
}

/** Queues refused the messages (a 4xx): the step fails without retries. */
export class QueueSendError extends NonRetryableError {}

/** An earlier send with the step's key is still in progress: the step is retried. */
export class QueueSendInProgress extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QueueSendInProgress";
  }
}

/** A copy of 1 to 10 message objects; a `TypeError`/`RangeError` at the call otherwise. */
export function checkMessages(messages: unknown): OutgoingMessage[] {
  if (!Array.isArray(messages)) {
    throw new TypeError("messages must be an array of 1 to 10 { body, attributes?, groupId?, dedupId? }");
  }
  if (messages.length < 1 || messages.length > MAX_MESSAGES) {
    throw new RangeError(`sendToQueue sends 1 to ${MAX_MESSAGES} messages, got ${messages.length}`);
  }
  return messages.map((m) => {
    if (!m || typeof m !== "object" || Array.isArray(m)) {
      throw new TypeError("each message must be an object { body, attributes?, groupId?, dedupId? }");
    }
    return { ...(m as OutgoingMessage) };
  });
}

function inProgress(error: ApiError): boolean {
  return error.status === 409 && error.code === "idempotency_conflict" && error.message.includes("in progress");
}

/** The step's function: send with the step's `wfq_` key; the answer's messages. */
export function sendFn(queues: QueueSender, queueId: string, messages: OutgoingMessage[]) {
  return async (step: StepContext): Promise<SentMessage[]> => {
    const digest = step.idempotencyKey; // hex SHA-256 of "<runId>:<stepId>"
    const outgoing = messages.map((message, index) =>
      message.groupId != null && message.dedupId == null ? { ...message, dedupId: `${digest}:${index}` } : message,
    );
    try {
      const answer = await queues.send(queueId, outgoing, { idempotencyKey: `wfq_${digest}` });
      return answer && Array.isArray(answer.messages) ? answer.messages : (answer as unknown as SentMessage[]);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      if (inProgress(error)) throw new QueueSendInProgress(`${error.status} ${error.code}: ${error.message}`);
      const resentByClient = error.status === 429 && error.code !== "quota_exceeded";
      if (error.status >= 400 && error.status < 500 && !resentByClient) {
        throw new QueueSendError(`${error.status} ${error.code}: ${error.message}`);
      }
      throw error;
    }
  };
}
