/**
 * `PushApp`: the HTTPS endpoint the engine calls (protocol section 1), served every way a
 * TypeScript app is: a Fetch-API handler (`app.fetch`: Vercel, Cloudflare, Deno, Bun, Node
 * with an adapter), a Node `http`/Express handler (`app.nodeHandler`), and an AWS Lambda
 * handler for a function URL or API Gateway (`app.lambdaHandler`). All three verify the
 * request's signature and hand it to one `handle`.
 */

import type { IncomingMessage, ServerResponse } from "node:http";

import { env } from "./api.js";
import { clock } from "./clock.js";
import { detectDeploymentId } from "./deployment.js";
import { Invocation } from "./driver.js";
import { EngineBusy, UnknownWorkflowError } from "./errors.js";
import { PROTOCOL_VERSION, ProtocolError, SDK_NAME, answers, parseInvoke, syncAnswer } from "./protocol/wire.js";
import { INVOCATION_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify } from "./signing.js";
import { httpTransportFactory, type TransportFactory } from "./transport.js";
import { indexWorkflows, type Workflow } from "./workflow.js";

export const SIGNING_KEY_ENV = "EZGH_SIGNING_KEY";

/** A request as `PushApp.handle` takes it: header names lower-cased, the path as sent
 * (without the query: the signature covers it). */
export interface HttpRequest {
  method: string;
  headers: Record<string, string>;
  body: Uint8Array;
  path: string;
}

export interface HttpResponse {
  status: number;
  body: Record<string, unknown>;
}

export interface PushAppOptions {
  /** The app's signing key (what `POST /apps` answered once); `EZGH_SIGNING_KEY` when left out. */
  signingKey?: string;
  /** This deployment's ID; detected on Vercel, AWS Lambda, Cloud Run, Fly.io and Render, or
   * `EZGH_DEPLOYMENT_ID`, when left out. */
  deploymentId?: string;
  /** How step calls reach the engine (tests replace it). */
  transportFactory?: TransportFactory;
}

/** An AWS Lambda event from a function URL, an API Gateway HTTP API (v2) or a REST API (v1). */
export interface LambdaHttpEvent {
  requestContext?: { http?: { method?: string; path?: string } };
  httpMethod?: string;
  rawPath?: string;
  path?: string;
  headers?: Record<string, string | undefined> | null;
  body?: string | null;
  isBase64Encoded?: boolean;
}

export interface LambdaHttpResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  isBase64Encoded: false;
}

export function errorResponse(status: number, code: string, message: string): HttpResponse {
  return { status, body: { error: { code, message } } };
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Serves workflows to the engine. Every POST must carry a valid signature made with the
 * app's signing key (else 401); GET answers a short description. */
export class PushApp {
  /** May be set after creation (e.g. once `POST /apps` answered it). */
  signingKey: string | undefined;
  private readonly index: Map<string, Workflow<any, any>>;
  private readonly deploymentId: string | undefined;
  private readonly transportFactory: TransportFactory;

  constructor(workflows: Iterable<Workflow<any, any>>, options: PushAppOptions = {}) {
    this.index = indexWorkflows(workflows);
    this.signingKey = options.signingKey ?? env(SIGNING_KEY_ENV);
    this.deploymentId = options.deploymentId;
    this.transportFactory = options.transportFactory ?? httpTransportFactory;
  }

  /** The workflows this app serves. */
  get workflows(): Workflow<any, any>[] {
    return [...this.index.values()];
  }

  /** The Fetch-API handler: `Request` in, `Response` out. */
  readonly fetch = async (request: Request): Promise<Response> => {
    let answer: HttpResponse;
    try {
      const headers: Record<string, string> = {};
      request.headers.forEach((value, name) => (headers[name.toLowerCase()] = value));
      const body = new Uint8Array(await request.arrayBuffer());
      answer = await this.handle({ method: request.method, headers, body, path: new URL(request.url).pathname || "/" });
    } catch (error) {
      answer = failure(error);
    }
    return new Response(JSON.stringify(answer.body), { status: answer.status, headers: { "content-type": "application/json" } });
  };

  /** The Node `http` handler, also an Express handler (mount it before any body parser, or
   * with `express.raw({ type: "*\/*" })`: the signature covers the raw body). */
  readonly nodeHandler = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let answer: HttpResponse;
    try {
      answer = await this.handleNode(req);
    } catch (error) {
      answer = failure(error);
    }
    const text = JSON.stringify(answer.body);
    res.writeHead(answer.status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) });
    res.end(text);
  };

  /** The AWS Lambda handler: a function URL, API Gateway HTTP API (v2) or REST API (v1). */
  readonly lambdaHandler = async (event: LambdaHttpEvent, _context?: unknown): Promise<LambdaHttpResult> => {
    let answer: HttpResponse;
    try {
      answer = await this.handle(lambdaRequest(event));
    } catch (error) {
      answer = error instanceof EventError ? errorResponse(400, "validation_error", error.message) : failure(error);
    }
    return { statusCode: answer.status, headers: { "content-type": "application/json" }, body: JSON.stringify(answer.body), isBase64Encoded: false };
  };

  /** Answer one request (what every adapter calls). */
  async handle(request: HttpRequest): Promise<HttpResponse> {
    const method = request.method.toUpperCase();
    if (method === "GET" || method === "HEAD") {
      return { status: 200, body: { sdk: SDK_NAME, protocol: PROTOCOL_VERSION, workflows: this.index.size } };
    }
    if (method !== "POST") return errorResponse(405, "method_not_allowed", "use POST (or GET to describe)");
    const invocation = request.headers[INVOCATION_HEADER] ?? "";
    const problem = await this.verify(request, invocation);
    if (problem) return errorResponse(401, "unauthorized", problem);
    let body: unknown;
    try {
      body = JSON.parse(decoder.decode(request.body));
    } catch {
      return errorResponse(400, "validation_error", "the body is not JSON");
    }
    const mismatch = checkInvocation(body, invocation);
    if (mismatch) return errorResponse(401, "unauthorized", mismatch);
    return this.dispatch(body);
  }

  private async verify(request: HttpRequest, invocation: string): Promise<string | undefined> {
    const key = this.signingKey ?? env(SIGNING_KEY_ENV);
    if (!key) return `no signing key configured: pass signingKey or set ${SIGNING_KEY_ENV}`;
    return verify(key, request.headers[TIMESTAMP_HEADER], request.headers[SIGNATURE_HEADER], request.body, clock.unixSeconds(), {
      method: request.method.toUpperCase(),
      path: request.path || "/",
      invocation,
    });
  }

  private async dispatch(body: unknown): Promise<HttpResponse> {
    const kind = isObject(body) ? body.type : undefined;
    const deploymentId = this.deploymentId ?? detectDeploymentId();
    if (kind === "sync") return { status: 200, body: syncAnswer([...this.index.keys()], deploymentId) };
    if (kind !== "invoke") return errorResponse(400, "validation_error", "type must be 'sync' or 'invoke'");
    let request;
    try {
      request = parseInvoke(body);
    } catch (error) {
      if (error instanceof ProtocolError) return errorResponse(400, "validation_error", error.message);
      throw error;
    }
    const workflow = this.index.get(request.run.workflow);
    if (!workflow) {
      const error = new UnknownWorkflowError(`this app has no workflow ${JSON.stringify(request.run.workflow)}`);
      return { status: 200, body: answers.failed(error.toBody(), deploymentId) };
    }
    try {
      const transport = this.transportFactory(request.api, deploymentId);
      return { status: 200, body: await new Invocation(workflow, request, transport, deploymentId).execute() };
    } catch (error) {
      if (error instanceof EngineBusy) {
        // Not the app's fault: the engine delivers it again later, counting no failure.
        console.warn(`ezgh: invocation of run ${request.run.id}: ${error.message}`);
        return { status: 200, body: answers.throttled(error.message, error.retryAfter, deploymentId) };
      }
      console.error(`ezgh: invocation of run ${request.run.id} failed in the SDK`, error);
      return errorResponse(500, "internal_error", `the SDK could not complete the invocation: ${(error as Error)?.name ?? "Error"}`);
    }
  }

  private async handleNode(req: IncomingMessage): Promise<HttpResponse> {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
    }
    const parsed = (req as { body?: unknown }).body;
    let body: Uint8Array;
    if (parsed instanceof Uint8Array) body = parsed;
    else if (typeof parsed === "string") body = new TextEncoder().encode(parsed);
    else if (req.readableEnded) {
      return errorResponse(
        400,
        "validation_error",
        "the body was parsed before the SDK saw it: mount the handler before express.json(), or with express.raw({ type: '*/*' })",
      );
    } else body = await readBody(req);
    const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "/";
    return this.handle({ method: req.method ?? "GET", headers, body, path: url.split("?")[0] || "/" });
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function failure(error: unknown): HttpResponse {
  console.error("ezgh: the SDK failed to handle a request", error);
  return errorResponse(500, "internal_error", "the SDK failed to handle the request");
}

/** The signed `X-Ezgh-Invocation` (`<invocationId>/<epoch>`) must name the invocation the
 * body carries: a signature made for one invocation never delivers another. */
function checkInvocation(body: unknown, invocation: string): string | undefined {
  if (!isObject(body) || body.type !== "invoke") {
    return invocation ? "X-Ezgh-Invocation on a request that is not an invoke" : undefined;
  }
  if (typeof body.invocationId !== "string") return undefined; // malformed: refused (400) when read
  const slash = invocation.indexOf("/");
  const id = slash < 0 ? invocation : invocation.slice(0, slash);
  const epoch = slash < 0 ? "" : invocation.slice(slash + 1);
  if (!id || !epoch || id !== body.invocationId) return "X-Ezgh-Invocation does not name this request's invocationId";
  return undefined;
}

async function readBody(req: IncomingMessage): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of req) chunks.push(typeof chunk === "string" ? new TextEncoder().encode(chunk) : (chunk as Uint8Array));
  return Buffer.concat(chunks);
}

class EventError extends Error {}

/** A request from a Lambda function URL / API Gateway v2 or v1 event. */
export function lambdaRequest(event: LambdaHttpEvent): HttpRequest {
  if (!event || typeof event !== "object" || Array.isArray(event)) throw new EventError("the Lambda event is not an HTTP event");
  const http: { method?: string; path?: string } = event.requestContext?.http ?? {};
  const method = http.method ?? event.httpMethod;
  if (typeof method !== "string") throw new EventError("the Lambda event has no HTTP method");
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    if (value !== undefined && value !== null) headers[name.toLowerCase()] = String(value);
  }
  const path = String(event.rawPath || http.path || event.path || "/").split("?")[0] || "/";
  return { method: method.toUpperCase(), headers, body: eventBody(event), path };
}

function eventBody(event: LambdaHttpEvent): Uint8Array {
  const body = event.body ?? "";
  if (!event.isBase64Encoded) return new TextEncoder().encode(body);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(body) || body.length % 4 !== 0) {
    throw new EventError("the Lambda event body is not valid base64");
  }
  return Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
}
