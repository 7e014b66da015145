/**
 * The HTTP API base of `WorkflowsClient` and `QueuesClient`: settings (an option, else the
 * environment), requests, errors, and the resend rules of the seed docs: a 429 (except
 * `quota_exceeded`), a 5xx or a network error is sent again after `Retry-After` (else a short
 * backoff), up to 3 times; any other 4xx throws at once. A creating `POST` carries an
 * `Idempotency-Key` (yours, or one the client makes for the call and keeps across its
 * resends), so a resend after a lost answer never creates twice.
 */

import { clock } from "./clock.js";

export const ENV_API_URL = "EZGH_API_URL";
export const ENV_API_KEY = "EZGH_API_KEY";
export const ENV_ORG_ID = "EZGH_ORG_ID";
export const ENV_PROJECT_ID = "EZGH_PROJECT_ID";

/** Resends after the first attempt. */
export const RESENDS = 3;
/** A longer `Retry-After` is cut to this many seconds. */
export const MAX_RETRY_WAIT_SECONDS = 30;

/** The API answered an error: `status` (HTTP), `code` and `message` from its body. */
export class ApiError extends Error {
  override readonly name = "ApiError";

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Seconds, from a `Retry-After` header (429, 503). */
    readonly retryAfter?: number,
  ) {
    super(message);
  }

  override toString(): string {
    return `ApiError: ${this.status} ${this.code}: ${this.message}`;
  }
}

/** The settings every client takes; each falls back to its environment variable. */
export interface ClientOptions {
  /** `EZGH_API_KEY` when left out. */
  apiKey?: string;
  /** `EZGH_ORG_ID` when left out. */
  organizationId?: string;
  /** `EZGH_PROJECT_ID` when left out. */
  projectId?: string;
  /** `EZGH_API_URL` when left out. */
  baseUrl?: string;
  /** Seconds a request may take (default 30). */
  timeoutSeconds?: number;
}

export interface RequestOptions {
  json?: unknown;
  params?: Record<string, string | number | undefined | null>;
  headers?: Record<string, string>;
  /** A creating POST: send an Idempotency-Key (this one, or one made for the call). */
  idempotencyKey?: string | true;
  /** Resends allowed (default `RESENDS`; 0 for a caller with a loop of its own). */
  resends?: number;
  /** Seconds this request may take (a long poll waits longer than the default). */
  timeoutSeconds?: number;
  signal?: AbortSignal;
}

export function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name] || undefined;
}

function setting(value: string | undefined, name: string, what: string): string {
  const found = value ?? env(name);
  if (!found) throw new TypeError(`no ${what}: pass it or set ${name}`);
  return found;
}

/** One URL path segment, percent-encoded. */
export function segment(value: string): string {
  return encodeURIComponent(String(value));
}

class NetworkError extends Error {}

/** Settings, requests and error mapping, shared by the clients. */
export class ApiClient {
  readonly apiKey: string;
  readonly organizationId: string;
  readonly projectId: string;
  readonly baseUrl: string;
  protected readonly timeoutSeconds: number;
  private readonly prefix: string;

  constructor(options: ClientOptions = {}) {
    this.apiKey = setting(options.apiKey, ENV_API_KEY, "API key");
    this.organizationId = setting(options.organizationId, ENV_ORG_ID, "organization ID");
    this.projectId = setting(options.projectId, ENV_PROJECT_ID, "project ID");
    this.baseUrl = setting(options.baseUrl, ENV_API_URL, "API base URL").replace(/\/+$/, "");
    this.timeoutSeconds = options.timeoutSeconds ?? 30;
    this.prefix = `/v1/organizations/${segment(this.organizationId)}/projects/${segment(this.projectId)}`;
  }

  /** Call `<base url><prefix><path>`; the parsed JSON answer (`{}` when empty). */
  async request<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const url = new URL(this.baseUrl + this.prefix + path);
    for (const [key, value] of Object.entries(options.params ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    const headers: Record<string, string> = { authorization: `Bearer ${this.apiKey}`, ...(options.headers ?? {}) };
    if (options.idempotencyKey !== undefined) {
      headers["idempotency-key"] = options.idempotencyKey === true ? clock.newUuid() : options.idempotencyKey;
    }
    let body: string | undefined;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] = "application/json";
    }
    const resends = options.resends ?? RESENDS;
    for (let attempt = 0; ; attempt++) {
      let wait: number | undefined;
      try {
        return (await this.once(method, url, headers, body, options)) as T;
      } catch (error) {
        const last = attempt >= resends || options.signal?.aborted;
        if (error instanceof ApiError) {
          const resend = error.status >= 500 || (error.status === 429 && error.code !== "quota_exceeded");
          if (!resend || last) throw error;
          wait = error.retryAfter;
        } else if (error instanceof NetworkError) {
          if (last) throw error.cause ?? error;
        } else {
          throw error;
        }
      }
      const seconds = Math.min(MAX_RETRY_WAIT_SECONDS, wait ?? 0.5 * 2 ** attempt);
      await clock.sleep(seconds * 1000, options.signal);
    }
  }

  private async once(method: string, url: URL, headers: Record<string, string>, body: string | undefined, options: RequestOptions): Promise<unknown> {
    const timeout = AbortSignal.timeout((options.timeoutSeconds ?? this.timeoutSeconds) * 1000);
    const signal = options.signal ? anySignal(options.signal, timeout) : timeout;
    let answer: Response;
    let text: string;
    try {
      answer = await fetch(url, { method, headers, body, signal });
      text = await answer.text();
    } catch (error) {
      throw new NetworkError(`${method} ${url.pathname}: ${(error as Error)?.message ?? error}`, { cause: error });
    }
    if (answer.status >= 400) throw apiError(answer, text);
    if (!text) return answer.status === 204 ? undefined : {};
    return JSON.parse(text);
  }
}

/** Aborted when either is (AbortSignal.any, which Node has only from 20.3). */
export function anySignal(a: AbortSignal, b: AbortSignal): AbortSignal {
  const controller = new AbortController();
  for (const signal of [a, b]) {
    if (signal.aborted) controller.abort(signal.reason);
    else signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

function apiError(answer: Response, text: string): ApiError {
  const header = answer.headers.get("retry-after");
  const seconds = header !== null && /^\s*\d+(\.\d+)?\s*$/.test(header) ? Number(header) : undefined;
  try {
    const error = (JSON.parse(text) as { error: { code: unknown; message?: unknown } }).error;
    if (error && typeof error.code === "string") {
      return new ApiError(answer.status, error.code, String(error.message ?? ""), seconds);
    }
  } catch {
    // not JSON: described below
  }
  return new ApiError(answer.status, "http_error", text.slice(0, 500), seconds);
}
