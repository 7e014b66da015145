/**
 * A pull worker's direct line to its task queue: SQS with the credentials the engine vends
 * (`POST .../apps/{app}/tasks/access`: an hour's credentials that can only receive and delete
 * this app's tasks). Long-polling the queue costs one SQS request per 20 s while idle, where
 * `tasks/poll` keeps a function waiting. The two requests (`ReceiveMessage`, `DeleteMessage`,
 * SQS's JSON protocol) are signed here with Signature Version 4: no AWS SDK needed.
 */

import { anySignal } from "./api.js";
import { clock } from "./clock.js";

const SERVICE = "sqs";
const CONTENT_TYPE = "application/x-amz-json-1.0";
/** Ask for fresh credentials this long before the current ones run out. */
const REFRESH_MARGIN_SECONDS = 300;

/** SQS refused a request: `code` is its error type (`QueueDoesNotExist`, `ExpiredToken`...). */
export class QueueError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`SQS ${status} ${code}: ${message}`);
    this.name = "QueueError";
  }
}

const encoder = new TextEncoder();

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function sha256Hex(text: string): Promise<string> {
  return hex(await globalThis.crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

async function hmac(key: ArrayBuffer | Uint8Array<ArrayBuffer>, text: string): Promise<ArrayBuffer> {
  const imported = await globalThis.crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return globalThis.crypto.subtle.sign("HMAC", imported, encoder.encode(text));
}

function amzDate(moment: Date): string {
  return moment.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
}

/** The headers of a SigV4-signed POST of `body` to `url` (no query string): `headers` plus
 * Host, X-Amz-Date, X-Amz-Security-Token and Authorization, all headers signed. */
export async function signV4(args: {
  url: string;
  body: string;
  headers: Record<string, string>;
  accessKey: string;
  secretKey: string;
  sessionToken?: string;
  region: string;
  service: string;
  moment: Date;
}): Promise<Record<string, string>> {
  const url = new URL(args.url);
  const date = amzDate(args.moment);
  const day = date.slice(0, 8);
  const signed: Record<string, string> = {};
  for (const [name, value] of Object.entries(args.headers)) signed[name.toLowerCase()] = value.trim().split(/\s+/).join(" ");
  signed.host = url.host;
  signed["x-amz-date"] = date;
  if (args.sessionToken) signed["x-amz-security-token"] = args.sessionToken;
  const names = Object.keys(signed).sort();
  const canonical = [
    "POST",
    url.pathname || "/",
    "",
    names.map((n) => `${n}:${signed[n]}\n`).join(""),
    names.join(";"),
    await sha256Hex(args.body),
  ].join("\n");
  const scope = `${day}/${args.region}/${args.service}/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", date, scope, await sha256Hex(canonical)].join("\n");
  let key = await hmac(encoder.encode(`AWS4${args.secretKey}`), day);
  for (const part of [args.region, args.service, "aws4_request"]) key = await hmac(key, part);
  const signature = hex(await hmac(key, toSign));
  const out: Record<string, string> = { ...args.headers, "X-Amz-Date": date };
  if (args.sessionToken) out["X-Amz-Security-Token"] = args.sessionToken;
  out.Authorization = `AWS4-HMAC-SHA256 Credential=${args.accessKey}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`;
  return out;
}

/** What `tasks/access` answered, and when (on the monotonic clock) it lapses. */
export class QueueAccess {
  constructor(
    readonly queueUrl: string,
    readonly endpointUrl: string,
    readonly region: string,
    readonly accessKey: string,
    readonly secretKey: string,
    readonly sessionToken: string,
    readonly renewAt: number,
  ) {}

  static fromAnswer(answer: any): QueueAccess {
    const creds = answer.credentials;
    const lifetime = Number(answer.expiresInSeconds) || 900;
    return new QueueAccess(
      String(answer.queueUrl),
      String(answer.endpointUrl).replace(/\/+$/, ""),
      String(answer.region),
      String(creds.accessKeyId),
      String(creds.secretAccessKey),
      String(creds.sessionToken),
      clock.monotonic() + Math.max(0, lifetime - REFRESH_MARGIN_SECONDS),
    );
  }

  get fresh(): boolean {
    return clock.monotonic() < this.renewAt;
  }
}

/** Receive and delete tasks on one app's queue with `QueueAccess` credentials. */
export class TaskQueue {
  constructor(readonly access: QueueAccess) {}

  private async call(action: string, params: Record<string, unknown>, timeoutSeconds: number, signal?: AbortSignal): Promise<any> {
    const a = this.access;
    const body = JSON.stringify({ QueueUrl: a.queueUrl, ...params });
    const url = `${a.endpointUrl}/`;
    const headers = await signV4({
      url,
      body,
      headers: { "Content-Type": CONTENT_TYPE, "X-Amz-Target": `AmazonSQS.${action}` },
      accessKey: a.accessKey,
      secretKey: a.secretKey,
      sessionToken: a.sessionToken,
      region: a.region,
      service: SERVICE,
      moment: clock.now(),
    });
    const timeout = AbortSignal.timeout(timeoutSeconds * 1000);
    const answer = await fetch(url, { method: "POST", body, headers, signal: signal ? anySignal(signal, timeout) : timeout });
    const text = await answer.text();
    if (answer.status !== 200) {
      let code = `HTTP${answer.status}`;
      let message = text.slice(0, 200);
      try {
        const parsed = JSON.parse(text);
        code = String(parsed.__type ?? parsed.code ?? code).split("#").pop() || code;
        message = String(parsed.message ?? parsed.Message);
      } catch {
        // not JSON
      }
      throw new QueueError(answer.status, code, message);
    }
    return text ? JSON.parse(text) : {};
  }

  /** One task's `[body, receipt handle]`, waiting up to `waitSeconds` (≤ 20). */
  async receive(waitSeconds: number, signal?: AbortSignal): Promise<[string, string] | undefined> {
    const wait = Math.max(0, Math.min(Math.trunc(waitSeconds), 20));
    const answer = await this.call("ReceiveMessage", { MaxNumberOfMessages: 1, WaitTimeSeconds: wait }, wait + 15, signal);
    const message = (answer.Messages ?? [])[0];
    return message ? [String(message.Body), String(message.ReceiptHandle)] : undefined;
  }

  async delete(receiptHandle: string): Promise<void> {
    await this.call("DeleteMessage", { ReceiptHandle: receiptHandle }, 15);
  }
}
