/** Step calls from the SDK to the engine (protocol section 2), behind a small interface. */

import { clock } from "./clock.js";
import { AbortInvocation, TransportError } from "./errors.js";
import type { ApiInfo, Op } from "./protocol/wire.js";

export const STEPS_PATH = "/v1/invocations/steps";
export type StepResult = Record<string, unknown>;

/**
 * Sends ops for one invocation and answers one result per op, in order. Throws
 * `AbortInvocation` when the engine refuses the call as stale (409) or the invocation's token
 * is no longer valid (401), and `TransportError` when it cannot deliver.
 */
export interface StepTransport {
  send(ops: Op[]): Promise<StepResult[]>;
}

/** Makes the transport of one invocation. */
export type TransportFactory = (api: ApiInfo, deploymentId: string | null) => StepTransport;

const TIMEOUT_MS = 30_000;

/** `StepTransport` over HTTP: `POST {api.url}/v1/invocations/steps`. 5xx answers and network
 * errors are sent again with the same ops (every op is idempotent). */
export class HttpStepTransport implements StepTransport {
  private readonly url: string;

  constructor(
    private readonly api: ApiInfo,
    private readonly deploymentId: string | null,
    private readonly backoffMs: readonly number[] = [100, 400, 1200],
  ) {
    this.url = api.url.replace(/\/+$/, "") + STEPS_PATH;
  }

  async send(ops: Op[]): Promise<StepResult[]> {
    const body = JSON.stringify({ deploymentId: this.deploymentId, ops });
    for (let attempt = 0; ; attempt++) {
      const problem = await this.attempt(body, ops.length);
      if (Array.isArray(problem)) return problem;
      const delay = this.backoffMs[attempt];
      if (delay === undefined) throw new TransportError(`step call failed: ${problem}`);
      console.warn(`ezgh: step call failed (${problem}); retrying in ${delay} ms`);
      await clock.sleep(delay);
    }
  }

  /** The results, or a description of a failure worth sending again. */
  private async attempt(body: string, count: number): Promise<StepResult[] | string> {
    let answer: Response;
    let text: string;
    try {
      answer = await fetch(this.url, {
        method: "POST",
        body,
        headers: { authorization: `Bearer ${this.api.token}`, "content-type": "application/json" },
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      text = await answer.text();
    } catch (error) {
      return `${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}`;
    }
    if (answer.status >= 500) return `HTTP ${answer.status}`;
    if (answer.status === 401 || answer.status === 409) throw new AbortInvocation(reason(answer.status, text));
    if (answer.status !== 200) throw new TransportError(`step call refused: ${reason(answer.status, text)}`);
    return results(text, count);
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
