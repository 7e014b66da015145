/**
 * Request signatures between the engine and a push app (protocol section 1), with Web Crypto
 * (Node 20, Deno, Bun, Cloudflare and Vercel all have it).
 *
 * Protocol 1.4 signs `v2`: HMAC-SHA256 of `v2\n<timestamp>\n<METHOD>\n<path>\n<invocation>\n`
 * and the raw body, where `invocation` is `X-Ezgh-Invocation` (`<invocationId>/<epoch>`,
 * empty for a sync). The engine also sends the older `v1`; this SDK accepts only `v2`.
 */

export const TOLERANCE_SECONDS = 300;
export const TIMESTAMP_HEADER = "x-ezgh-timestamp";
export const SIGNATURE_HEADER = "x-ezgh-signature";
export const INVOCATION_HEADER = "x-ezgh-invocation";

const encoder = new TextEncoder();

function concat(head: Uint8Array, body: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

function hmacKey(key: string) {
  return globalThis.crypto.subtle.importKey("raw", encoder.encode(key), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** HMAC-SHA256 of `data` with `key` (UTF-8), in hex. */
export async function hmacHex(key: string, data: Uint8Array<ArrayBuffer>): Promise<string> {
  return hex(await globalThis.crypto.subtle.sign("HMAC", await hmacKey(key), data));
}

/** `v2=<hex>`: the signature of a request, by protocol 1.4. */
export async function signV2(
  key: string,
  timestamp: string,
  method: string,
  path: string,
  invocation: string,
  body: Uint8Array,
): Promise<string> {
  const head = encoder.encode(`v2\n${timestamp}\n${method.toUpperCase()}\n${path}\n${invocation}\n`);
  return `v2=${await hmacHex(key, concat(head, body))}`;
}

/** `v1=<hex>`: the form before 1.4 (the engine still sends it; tests send it too). */
export async function signV1(key: string, timestamp: string, body: Uint8Array): Promise<string> {
  return `v1=${await hmacHex(key, concat(encoder.encode(`${timestamp}.`), body))}`;
}

/** The headers the engine sends with a POST (both forms), for tests and tools. */
export async function signedHeaders(
  key: string,
  timestamp: string,
  body: Uint8Array,
  options: { path?: string; invocation?: string } = {},
): Promise<Record<string, string>> {
  const invocation = options.invocation ?? "";
  const v2 = await signV2(key, timestamp, "POST", options.path ?? "/", invocation, body);
  const headers: Record<string, string> = {
    [TIMESTAMP_HEADER]: timestamp,
    [SIGNATURE_HEADER]: `${await signV1(key, timestamp, body)},${v2}`,
  };
  if (invocation) headers[INVOCATION_HEADER] = invocation;
  return headers;
}

/** Compare without an early exit, so the time taken tells nothing about where they differ. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** `undefined` when the request verifies, else the reason it does not. The signature header
 * may carry several comma-separated values (both forms, key rotation); one `v2=` must verify. */
export async function verify(
  key: string,
  timestamp: string | undefined,
  signature: string | undefined,
  body: Uint8Array,
  now: number,
  request: { method: string; path: string; invocation: string },
): Promise<string | undefined> {
  if (!timestamp || !signature) return "missing X-Ezgh-Timestamp or X-Ezgh-Signature header";
  if (!/^[0-9]+$/.test(timestamp)) return "X-Ezgh-Timestamp is not an integer";
  if (Math.abs(now - Number(timestamp)) > TOLERANCE_SECONDS) {
    return "X-Ezgh-Timestamp is more than 300 seconds away from this server's clock";
  }
  const candidates = signature.split(",").map((part) => part.trim()).filter((part) => part.startsWith("v2="));
  if (!candidates.length) return "no v2 signature: this SDK needs an engine speaking protocol 1.4 or later";
  const expected = await signV2(key, timestamp, request.method, request.path, request.invocation, body);
  if (candidates.some((candidate) => sameText(expected, candidate))) return undefined;
  return "signature does not verify (for this method, path, invocation and body)";
}
