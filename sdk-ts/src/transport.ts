/**
 * Step calls from the SDK to the engine (protocol section 2), behind a small interface, and
 * (1.5) the reads of what an invoke request gave as references: history pages and values.
 */

import { clock } from "./clock.js";
import { AbortInvocation, EngineBusy, TransportError } from "./errors.js";
import { PROTOCOL_VERSION, ProtocolError, parseHistoryPage, type ApiInfo, type HistoryPage, type Op } from "./protocol/wire.js";

export const STEPS_PATH = "/v1/invocations/steps";
export const HISTORY_PATH = "/v1/invocations/history";
export const PAYLOAD_PATH = "/v1/invocations/payload";
export type StepResult = Record<string, unknown>;

/**
 * Sends ops for one invocation and answers one result per op, in order. Throws
 * `AbortInvocation` when the engine refuses the call as stale (409) or the invocation's token
 * is no longer valid (401), and `TransportError` when it cannot deliver.
 */
export interface StepTransport {
  send(ops: Op[]): Promise<StepResult[]>;
}

/** Reads what an invoke request gave as references (protocol 1.5), with the same token and
 * the same errors as `StepTransport.send`. */
export interface StateReader {
  /** A page of the run's history: its steps, and the cursor of the next page. */
  readHistory(cursor: string): Promise<HistoryPage>;
  /** The JSON value at the payload path `ref` of the run. */
  readPayload(ref: string): Promise<unknown>;
}

export function isStateReader(transport: unknown): transport is StateReader {
  const t = transport as Partial<StateReader> | undefined;
  return typeof t?.readHistory === "function" && typeof t?.readPayload === "function";
}

/** Makes the transport of one invocation. */
export type TransportFactory = (api: ApiInfo, deploymentId: string | null) => StepTransport;

const TIMEOUT_MS = 30_000;
/** How long one call keeps trying while the engine is busy or throttled (429, 503): inside the
 * steps function's own 29 s and the engine's default 300 s wait for an invocation's answer. */
export const RETRY_FOR_MS = 30_000;
/** The longest wait between two tries, and the longest `Retry-After` honoured as asked. */
const MAX_RETRY_WAIT_MS = 5_000;
const MAX_RETRY_AFTER_MS = 20_000;
/** Past the schedule, a busy engine's waits double from at least this. */
const MIN_BUSY_WAIT_MS = 100;
/** The engine busy (503 `unavailable`, 429 `rate_limited`) or the steps function's URL
 * throttled by Lambda (429 "Rate Exceeded"): tried for up to `retryForMs`. Another 5xx or a
 * network error: tried as often as the backoff schedule has steps. */
const BUSY_STATUSES: ReadonlySet<number> = new Set([429, 503]);

export interface HttpStepTransportOptions {
  /** The waits before each try again (ms), each with equal jitter (default 100, 400, 1200). */
  backoffMs?: readonly number[];
  /** How long a busy engine is tried (default `RETRY_FOR_MS`). */
  retryForMs?: number;
}

type Failure = { ok: false; problem: string; busy: boolean; retryAfterMs: number | undefined };

/** `StepTransport` over HTTP: `POST {api.url}/v1/invocations/steps`, with the Python SDK's
 * resend rules. A failed call is sent again with the same ops (every op is idempotent) after
 * the backoff schedule's jittered waits, at least the answer's `Retry-After`: a throttled or
 * busy one (429, 503) for up to `retryForMs`, its waits doubling past the schedule (at most
 * 5 s); another 5xx or a network error once per step of the schedule. It is a `StateReader`
 * too: the history and payload calls go to the same engine URL, with the same token and
 * retries (they only read). */
export class HttpStepTransport implements StepTransport, StateReader {
  private readonly base: string;
  private readonly backoffMs: readonly number[];
  private readonly retryForMs: number;

  constructor(
    private readonly api: ApiInfo,
    private readonly deploymentId: string | null,
    options: HttpStepTransportOptions = {},
  ) {
    this.base = api.url.replace(/\/+$/, "");
    this.backoffMs = options.backoffMs?.length ? options.backoffMs : [100, 400, 1200];
    this.retryForMs = options.retryForMs ?? RETRY_FOR_MS;
  }

  async send(ops: Op[]): Promise<StepResult[]> {
    // `protocol`: a `recorded` result may then give a large output as a reference (1.5).
    const body = { deploymentId: this.deploymentId, ops, protocol: PROTOCOL_VERSION };
    return results(await this.call(STEPS_PATH, body, "step call"), ops.length);
  }

  async readHistory(cursor: string): Promise<HistoryPage> {
    const answer = parse(await this.call(HISTORY_PATH, { cursor }, "history read"), "history read");
    try {
      return parseHistoryPage(answer);
    } catch (error) {
      if (error instanceof ProtocolError) throw new TransportError(`history read answered no page: ${error.message}`);
      throw error;
    }
  }

  async readPayload(ref: string): Promise<unknown> {
    const answer = parse(await this.call(PAYLOAD_PATH, { ref }, "payload read"), "payload read");
    if (!answer || typeof answer !== "object" || Array.isArray(answer) || !("value" in answer)) {
      throw new TransportError("payload read answered no value");
    }
    return (answer as { value: unknown }).value;
  }

  /** The text of the 200 answer to `body` at `path`, sent again as the class says. */
  private async call(path: string, body: unknown, what: string): Promise<string> {
    const text = JSON.stringify(body);
    const began = clock.monotonic() * 1000;
    for (let tried = 0; ; tried++) {
      const answer = await this.attempt(this.base + path, text, what);
      if (answer.ok) return answer.text;
      const delay = this.wait(tried, answer);
      if (delay === undefined || clock.monotonic() * 1000 + delay - began >= this.retryForMs) {
        if (answer.busy) {
          const retryAfter = answer.retryAfterMs === undefined ? null : answer.retryAfterMs / 1000;
          throw new EngineBusy(`${what} stayed throttled: ${answer.problem}`, retryAfter);
        }
        throw new TransportError(`${what} failed: ${answer.problem}`);
      }
      console.warn(`ezgh: ${what} failed (${answer.problem}); retrying in ${Math.round(delay)} ms`);
      await clock.sleep(delay);
    }
  }

  /** The wait (ms) before try `tried` + 1: the schedule's step (for a busy engine, doubling
   * past its end) with equal jitter, or the answer's `Retry-After` if longer; undefined when
   * there is no next try (past the schedule and not busy, or a `Retry-After` beyond what the
   * SDK waits). */
  private wait(tried: number, failure: Failure): number | undefined {
    const { busy, retryAfterMs } = failure;
    if (retryAfterMs !== undefined && retryAfterMs > MAX_RETRY_AFTER_MS) return undefined;
    const steps = this.backoffMs;
    let base: number;
    if (tried < steps.length) base = steps[tried]!;
    else if (busy) base = Math.max(steps[steps.length - 1]!, MIN_BUSY_WAIT_MS) * 2 ** Math.min(tried - steps.length + 1, 8);
    else return undefined;
    const jittered = Math.min(base, MAX_RETRY_WAIT_MS) * (0.5 + 0.5 * clock.randomFraction());
    return Math.max(jittered, retryAfterMs ?? 0);
  }

  /** The answer's text, or a failure worth sending again: its description, whether the engine
   * was busy (429, 503), and the answer's `Retry-After`. */
  private async attempt(url: string, body: string, what: string): Promise<{ ok: true; text: string } | Failure> {
    let answer: Response;
    let text: string;
    try {
      answer = await fetch(url, {
        method: "POST",
        body,
        headers: { authorization: `Bearer ${this.api.token}`, "content-type": "application/json" },
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      text = await answer.text();
    } catch (error) {
      const problem = `${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}`;
      return { ok: false, problem, busy: false, retryAfterMs: undefined };
    }
    if (BUSY_STATUSES.has(answer.status) || answer.status >= 500) {
      return { ok: false, problem: `HTTP ${answer.status}`, busy: BUSY_STATUSES.has(answer.status), retryAfterMs: retryAfterMs(answer) };
    }
    if (answer.status === 401 || answer.status === 409) throw new AbortInvocation(reason(answer.status, text));
    if (answer.status !== 200) throw new TransportError(`${what} refused: ${reason(answer.status, text)}`);
    return { ok: true, text };
  }
}

/** `Retry-After` in ms (a number of seconds; a date is not used), or undefined. */
function retryAfterMs(answer: Response): number | undefined {
  const value = answer.headers.get("retry-after");
  const seconds = value === null || value.trim() === "" ? NaN : Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

function reason(status: number, text: string): string {
  try {
    const error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error ?? {};
    return `${status} ${error.code}: ${error.message}`;
  } catch {
    return `HTTP ${status}`;
  }
}

function parse(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new TransportError(`${what} answer is not JSON`);
  }
}

function results(text: string, count: number): StepResult[] {
  let parsed: unknown;
  try {
    parsed = (JSON.parse(text) as { results?: unknown }).results;
  } catch {
    throw new TransportError("step call answer is not JSON with 'results'");
  }
  if (!Array.isArray(parsed) || parsed.length !== count) {
    throw new TransportError(`step call answer has no list of ${count} results`);
  }
  return parsed as StepResult[];
}

/** The default `TransportFactory`. */
export const httpTransportFactory: TransportFactory = (api, deploymentId) => new HttpStepTransport(api, deploymentId);
