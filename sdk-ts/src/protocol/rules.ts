/**
 * The decisions both sides of the protocol make (the engine's `core/protocol_rules.py`, the
 * Python SDK's copy of it): the statuses, the retry budget, when a held end was answered with
 * another outcome. test/rules.test.ts holds these values against that file.
 */

/** A run's statuses once it ended, and those of a live run. */
export const RUN_ENDED_STATUSES: ReadonlySet<string> = new Set(["completed", "failed", "cancelled", "timedOut"]);
export const RUN_LIVE_STATUSES: ReadonlySet<string> = new Set(["running", "cancelling"]);
/** A step's statuses once it ended: its outcome is recorded and replays as is. */
export const STEP_ENDED_STATUSES: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"]);

/** `retries` left out on a `run` step means this many retries (4 attempts); a step asks for
 * at most MAX_RETRIES, whatever it says. */
export const DEFAULT_RETRIES = 3;

/** An invocation whose step calls stayed throttled answers this outcome (with `retryAfter`):
 * the engine delivers it again later and counts no failed delivery. */
export const THROTTLED_OUTCOME = "throttled";
export const MAX_RETRIES = 100;

/** Whether a retryable failure of `attempt` (from 1) of a step allowed `retries` retries runs
 * again: the SDK sends such a fail at once (not held), the engine schedules the retry. */
export function mayRetry(attempt: number, retries: number): boolean {
  return attempt <= Math.min(retries, MAX_RETRIES);
}

/** A recorded error's `code` and `name`, and its `message`, at most (UTF-8 bytes): an error is
 * kept in its step's or its run's item. Longer ones are cut where they are made, the SDK before
 * it sends them and the engine when it receives them. */
export const MAX_ERROR_FIELD_BYTES = 256;
export const MAX_ERROR_MESSAGE_BYTES = 8192;
export const CUT_MARK = " [cut]";

const utf8 = new TextEncoder();

/** `text`, cut to at most `limit` UTF-8 bytes (ending with `CUT_MARK` when cut), never in the
 * middle of a character. */
export function clip(text: string, limit: number): string {
  const data = utf8.encode(text);
  if (data.length <= limit) return text;
  let room = limit - utf8.encode(CUT_MARK).length;
  while (room > 0 && (data[room]! & 0xc0) === 0x80) room--; // back to a character's first byte
  return new TextDecoder().decode(data.subarray(0, room)) + CUT_MARK;
}

/** Deep equality of two JSON values (object key order does not matter). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") {
    return (a ?? null) === (b ?? null);
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  }
  const ak = Object.keys(a);
  const bo = b as Record<string, unknown>;
  return ak.length === Object.keys(bo).length && ak.every((k) => k in bo && jsonEqual((a as Record<string, unknown>)[k], bo[k]));
}

/** Whether a step end (`complete` or `fail`) was answered `recorded` with another outcome
 * than it carried: another invocation recorded the step first, so this one went on with a
 * value the run does not hold. */
export function endDiffers(op: Record<string, unknown>, result: Record<string, unknown>): boolean {
  if (result.result !== "recorded") return false;
  const step = (result.step && typeof result.step === "object" ? result.step : {}) as Record<string, unknown>;
  if (op.op === "fail") return step.status !== "failed" || !jsonEqual(step.error, op.error);
  return step.status !== "completed" || !jsonEqual(step.output, op.output);
}
