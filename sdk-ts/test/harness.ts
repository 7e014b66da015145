/**
 * What the end-to-end tests need around a running `ezgh dev` (tests/ts/test_sdk_ts.py starts
 * one on a free loopback port and passes its environment): its clients, servers on loopback
 * for each way a push app is served, and its skip clock (`--clock-file`), so a sleep of days
 * ends without waiting.
 */

import assert from "node:assert/strict";
import { openSync, readSync, writeSync, closeSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { PushApp, QueuesClient, WorkflowsClient, type LambdaHttpEvent, type Run, type Workflow } from "@ezgh/workflows";

export const HAS_ENGINE = Boolean(process.env.EZGH_API_URL && process.env.EZGH_TEST_CLOCK_FILE);

export function workflowsClient(): WorkflowsClient {
  return new WorkflowsClient();
}

export function queuesClient(): QueuesClient {
  return new QueuesClient();
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export interface Served {
  url: string;
  close(): Promise<void>;
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void, path: string): Promise<Served> {
  const server: Server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${path}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The Fetch handler behind Node's http server (the adapter a Node host of a Fetch handler
 * uses: Request in, Response out). */
export function serveFetch(app: PushApp, path: string): Promise<Served> {
  return listen(async (req, res) => {
    const body = await readBody(req);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === "string") headers.set(name, value);
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
    });
    const response = await app.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  }, path);
}

/** The Node handler, as `http.createServer` (or Express) takes it. */
export function serveNode(app: PushApp, path: string): Promise<Served> {
  return listen((req, res) => void app.nodeHandler(req, res), path);
}

/** What a Lambda function URL carries at most, each way: 6 MB (its event, its result). */
export const LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024;

/** What the function-URL adapter of `serveLambda` saw. */
export interface FunctionUrlStats {
  /** The largest event it passed to the handler (bytes of its JSON). */
  largest: number;
  /** Requests it refused (413) for an event over 6 MB. */
  refused: number;
}

/** The Lambda handler behind a tiny local adapter that does what a Lambda function URL does:
 * each request becomes the event a function URL sends (payload format 2.0), refused with 413
 * when that event passes 6 MB, before the handler runs; the result becomes the answer (a 502
 * when it passes 6 MB). */
export function serveLambda(app: PushApp, path: string, stats: FunctionUrlStats = { largest: 0, refused: 0 }): Promise<Served> {
  return listen(async (req, res) => {
    const body = await readBody(req);
    const [rawPath, rawQueryString = ""] = (req.url ?? "/").split("?") as [string, string?];
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(",") : value;
    }
    const binary = !String(headers["content-type"] ?? "").startsWith("application/json");
    const event: LambdaHttpEvent & Record<string, unknown> = {
      version: "2.0",
      routeKey: "$default",
      rawPath,
      rawQueryString,
      headers,
      requestContext: { http: { method: req.method ?? "GET", path: rawPath } },
      body: binary ? body.toString("base64") : body.toString("utf8"),
      isBase64Encoded: binary,
    };
    const size = Buffer.byteLength(JSON.stringify(event));
    if (size > LAMBDA_PAYLOAD_BYTES) {
      stats.refused++;
      res.writeHead(413, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ Message: `Request must be smaller than ${LAMBDA_PAYLOAD_BYTES} bytes` }));
    }
    stats.largest = Math.max(stats.largest, size);
    const result = await app.lambdaHandler(event, {});
    if (Buffer.byteLength(JSON.stringify(result)) > LAMBDA_PAYLOAD_BYTES) {
      res.writeHead(502, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ Message: "response too large" }));
    }
    res.writeHead(result.statusCode, result.headers);
    res.end(result.isBase64Encoded ? Buffer.from(result.body, "base64") : result.body);
  }, path);
}

/** Create a push app at `url`, give `app` its signing key, and sync it (as docs/push-apps.md
 * tells a user serving an app beside `ezgh dev`). */
export async function registerApp(name: string, url: string, app: PushApp): Promise<{ id: string }> {
  const client = workflowsClient();
  const existing = (await client.listApps()).apps.find((a) => a.name === name);
  if (existing) await client.deleteApp(existing.id);
  const created = await client.createApp({ name, kind: "push", url });
  app.signingKey = created.signingKey;
  const synced = await client.syncApp(created.id);
  assert.equal(synced.status, "synced");
  return created;
}

/** Create a pull app (deleting one of the name a rerun on the same engine left). */
export async function createPullApp(name: string): Promise<{ id: string }> {
  const client = workflowsClient();
  const existing = (await client.listApps()).apps.find((a) => a.name === name);
  if (existing) await client.deleteApp(existing.id);
  return client.createApp({ name, kind: "pull" });
}

/** Poll until `check()` answers something; a generous backstop (these take seconds). */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await check();
    if (found) return found;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const ENDED = new Set(["completed", "failed", "cancelled", "timedOut"]);

export function waitRun(runId: string, check: (run: Run) => boolean = (run) => ENDED.has(run.status)): Promise<Run> {
  let last: Run | undefined;
  return waitFor(`run ${runId}`, async () => {
    last = await workflowsClient().getRun(runId);
    return check(last) ? last : undefined;
  }).catch((error) => {
    throw new Error(`${(error as Error).message}; last seen: ${JSON.stringify(last)}`);
  });
}

/** Wait for the run to end, moving the engine's clock `seconds` once for each sleep it meets
 * (a sleep of less). Once per sleep: an invocation running when the clock moves sees its
 * token's lifetime move too. */
export function waitRunSkippingSleeps(runId: string, seconds = 86_400 + 120): Promise<Run> {
  const skipped = new Set<string>();
  return waitRun(runId, (run) => {
    if (ENDED.has(run.status)) return true;
    for (const step of run.steps) {
      if (step.status !== "sleeping" || skipped.has(step.id)) continue;
      skipped.add(step.id);
      advanceClock(seconds);
    }
    return false;
  });
}

export function stepIs(name: string, status: string): (run: Run) => boolean {
  return (run) => run.steps.some((step) => step.name === name && step.status === status);
}

/** Move the engine's skip clock forward (the `SkipClock.share()` file: a little-endian double
 * of seconds, which `ezgh dev --clock-file` reads on every look at the time). */
export function advanceClock(seconds: number): void {
  const fd = openSync(process.env.EZGH_TEST_CLOCK_FILE!, "r+");
  try {
    const buffer = Buffer.alloc(8);
    readSync(fd, buffer, 0, 8, 0);
    buffer.writeDoubleLE(buffer.readDoubleLE(0) + seconds, 0);
    writeSync(fd, buffer, 0, 8, 0);
  } finally {
    closeSync(fd);
  }
}

/** A loopback HTTPS-subscription target that keeps every message delivered to it. */
export async function messageSink(): Promise<Served & { messages: Array<Record<string, any>> }> {
  const messages: Array<Record<string, any>> = [];
  const served = await listen(async (req, res) => {
    messages.push(JSON.parse((await readBody(req)).toString("utf8")));
    res.writeHead(200).end();
  }, "/sink");
  return Object.assign(served, { messages });
}

export type { Workflow };
