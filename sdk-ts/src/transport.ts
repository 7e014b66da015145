/**
 * Step calls from the SDK to the engine (protocol section 2), behind a small interface, and
 * (1.5) the reads of what an invoke request gave as references: history pages and values.
 */

import { clock } from "./clock.js";
import { AbortInvocation, TransportError } from "./errors.js";
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

/** `StepTransport` over HTTP: `POST {api.url}/v1/invocations/steps`. 5xx answers and network
 * errors are sent again with the same ops (every op is idempotent). It is a `StateReader`
 * too: the history and payload calls go to the same engine URL, with the same token and
 * retries (they only read). */
export class HttpStepTransport implements StepTransport, StateReader {
  private readonly base: string;

  constructor(
    private readonly api: ApiInfo,
    private readonly deploymentId: string | null,
    private readonly backoffMs: readonly number[] = [100, 400, 1200],
  ) {
    this.base = api.url.replace(/\/+$/, "");
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

  /** The text of the 200 answer to `body` at `path`, sent again on 5xx and network errors. */
  private async call(path: string, body: unknown, what: string): Promise<string> {
    const text = JSON.stringify(body);
    for (let attempt = 0; ; attempt++) {
      const answer = await this.attempt(this.base + path, text, what);
      if (answer.ok) return answer.text;
      const delay = this.backoffMs[attempt];
      if (delay === undefined) throw new TransportError(`${what} failed: ${answer.problem}`);
      console.warn(`ezgh: ${what} failed (${answer.problem}); retrying in ${delay} ms`);
      await clock.sleep(delay);
    }
  }

  /** The answer's text, or a description of a failure worth sending again. */
  private async attempt(url: string, body: string, what: string): Promise<{ ok: true; text: string } | { ok: false; problem: string }> {
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
      return { ok: false, problem: `${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}` };
    }
    if (answer.status >= 500) return { ok: false, problem: `HTTP ${answer.status}` };
    if (answer.status === 401 || answer.status === 409) throw new AbortInvocation(reason(answer.status, text));
    if (answer.status !== 200) throw new TransportError(`${what} refused: ${reason(answer.status, text)}`);
    return { ok: true, text };
  }
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
