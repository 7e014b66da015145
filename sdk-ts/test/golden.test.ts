/**
 * The TypeScript SDK held to the golden exchanges (tests/golden/exchanges, recorded with the
 * real engine and the Python SDK, in protocol 1.5): each recorded request, played to a
 * TypeScript `PushApp` through its Fetch handler, signed as the engine signs, with the
 * engine's recorded answers to its step calls and reads (history pages, values by reference),
 * must make the recorded calls and reads, in order, and give the recorded answer. The Python
 * side's twin is tests/golden/test_sdk_side.py; the recordings are read where they are.
 */

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { CACHE } from "../src/payloadCache.js";
import { PROTOCOL_VERSION, parseHistoryPage, type HistoryPage } from "../src/protocol/wire.js";
import { signedHeaders } from "../src/signing.js";
import type { StateReader, StepTransport } from "../src/transport.js";
import { Canon } from "./golden/canon.js";
import { makeApp } from "./golden/workflows.js";

const HERE = dirname(fileURLToPath(import.meta.url));
// build/test -> the repository root (sdk-ts/build/test).
const EXCHANGES = process.env.EZGH_GOLDEN_DIR ?? resolve(HERE, "../../../tests/golden/exchanges");
const KEY = "golden-signing-key";

type Call = { ops?: unknown; results?: unknown; read?: string; body?: unknown; answer?: unknown };

interface Exchange {
  invocations: Array<{
    request: Record<string, any>;
    calls: Call[];
    answer: unknown;
  }>;
}

/** Answers each step call and read with the recorded answer, noting where what the SDK made
 * differs from the recording. */
class ScriptedTransport implements StepTransport, StateReader {
  readonly problems: string[] = [];

  constructor(
    readonly calls: Call[],
    readonly canon: Canon,
  ) {}

  private next(made: unknown): Call {
    const call = this.calls.shift();
    if (!call) {
      this.problems.push(`an unrecorded call ${JSON.stringify(made)}`);
      throw new Error("unrecorded call");
    }
    return call;
  }

  async send(ops: Record<string, unknown>[]): Promise<Record<string, unknown>[]> {
    const sent = this.canon.toCanonical(JSON.parse(JSON.stringify(ops)));
    const call = this.next(sent);
    try {
      assert.deepStrictEqual(sent, call.ops);
    } catch {
      this.problems.push(`step call ${JSON.stringify(sent)}\n recorded ${JSON.stringify(call)}`);
    }
    return (call.results === undefined ? [] : this.canon.toReal(call.results)) as Record<string, unknown>[];
  }

  private read(what: string, body: Record<string, unknown>): unknown {
    const made = { read: what, body: this.canon.toCanonical(body) };
    const call = this.next(made);
    try {
      assert.deepStrictEqual(made, { read: call.read, body: call.body });
    } catch {
      this.problems.push(`${JSON.stringify(made)}\n recorded ${JSON.stringify(call)}`);
    }
    return this.canon.toReal(call.answer);
  }

  async readHistory(cursor: string): Promise<HistoryPage> {
    return parseHistoryPage(this.read("history", { cursor }));
  }

  async readPayload(ref: string): Promise<unknown> {
    return (this.read("payload", { ref }) as { value: unknown }).value;
  }
}

const names = readdirSync(EXCHANGES)
  .filter((name) => name.endsWith(".json"))
  .sort();

test("the golden exchanges are there, recorded in this SDK's protocol", () => {
  assert.ok(names.length >= 9, `found ${names.length} exchanges in ${EXCHANGES}`);
  const large = JSON.parse(readFileSync(join(EXCHANGES, "golden-large.json"), "utf8")) as Exchange;
  assert.ok(large.invocations.some(({ calls }) => calls.some((call) => call.read === "payload")), "golden-large reads by reference");
  for (const name of names) {
    const exchange = JSON.parse(readFileSync(join(EXCHANGES, name), "utf8")) as Exchange;
    for (const { request } of exchange.invocations) assert.equal(request.protocol, PROTOCOL_VERSION, name);
  }
});

for (const name of names) {
  const exchange = JSON.parse(readFileSync(join(EXCHANGES, name), "utf8")) as Exchange;
  describe(name.replace(/\.json$/, ""), () => {
    exchange.invocations.forEach((invocation, n) => {
      test(`invocation ${n} makes the recorded calls and reads, and answer`, async () => {
        const recorded = invocation.request;
        const request = { ...recorded, invocationId: `inv-${n}`, api: { ...recorded.api, token: "t" } };
        const canon = Canon.seeded(request);
        const scripted = new ScriptedTransport([...invocation.calls], canon);
        const app = makeApp({ signingKey: KEY, transportFactory: () => scripted, deploymentId: undefined });
        CACHE.clear(); // each recorded request met a cold SDK
        const raw = new TextEncoder().encode(JSON.stringify(request));
        const timestamp = String(Math.trunc(Date.now() / 1000));
        const headers = await signedHeaders(KEY, timestamp, raw, { path: "/", invocation: `inv-${n}/1` });
        const answer = await app.fetch(new Request("http://app.invalid/", { method: "POST", body: raw, headers }));
        const text = await answer.text();
        assert.equal(answer.status, 200, text);
        assert.deepEqual(scripted.problems, []);
        assert.deepEqual(scripted.calls, [], "recorded calls the SDK did not make");
        assert.deepStrictEqual(canon.toCanonical(JSON.parse(text)), invocation.answer);
      });
    });
  });
}
