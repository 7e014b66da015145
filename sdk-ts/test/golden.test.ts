/**
 * The TypeScript SDK held to the golden exchanges (tests/golden/exchanges, recorded with the
 * real engine and the Python SDK): each recorded request, played to a TypeScript `PushApp`
 * through its Fetch handler, signed as the engine signs, with the engine's recorded answers to
 * its step calls, must make the recorded step calls and give the recorded answer. The Python
 * side's twin is tests/golden/test_sdk_side.py; the recordings are read where they are.
 */

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { signedHeaders } from "../src/signing.js";
import type { StepTransport } from "../src/transport.js";
import { Canon } from "./golden/canon.js";
import { makeApp } from "./golden/workflows.js";

const HERE = dirname(fileURLToPath(import.meta.url));
// build/test -> the repository root (sdk-ts/build/test).
const EXCHANGES = process.env.EZGH_GOLDEN_DIR ?? resolve(HERE, "../../../tests/golden/exchanges");
const KEY = "golden-signing-key";

interface Exchange {
  invocations: Array<{
    request: Record<string, any>;
    calls: Array<{ ops: unknown; results: unknown }>;
    answer: unknown;
  }>;
}

/** Answers each step call with the recorded results, noting where its ops differ. */
class ScriptedTransport implements StepTransport {
  readonly problems: string[] = [];

  constructor(
    readonly calls: Exchange["invocations"][number]["calls"],
    readonly canon: Canon,
  ) {}

  async send(ops: Record<string, unknown>[]): Promise<Record<string, unknown>[]> {
    const sent = this.canon.toCanonical(JSON.parse(JSON.stringify(ops)));
    const call = this.calls.shift();
    if (!call) {
      this.problems.push(`an unrecorded step call ${JSON.stringify(sent)}`);
      throw new Error("unrecorded step call");
    }
    try {
      assert.deepStrictEqual(sent, call.ops);
    } catch {
      this.problems.push(`step call ${JSON.stringify(sent)}\n recorded ${JSON.stringify(call.ops)}`);
    }
    return this.canon.toReal(call.results) as Record<string, unknown>[];
  }
}

const names = readdirSync(EXCHANGES)
  .filter((name) => name.endsWith(".json"))
  .sort();

test("the golden exchanges are there", () => {
  assert.ok(names.length >= 8, `found ${names.length} exchanges in ${EXCHANGES}`);
});

for (const name of names) {
  const exchange = JSON.parse(readFileSync(join(EXCHANGES, name), "utf8")) as Exchange;
  describe(name.replace(/\.json$/, ""), () => {
    exchange.invocations.forEach((invocation, n) => {
      test(`invocation ${n} makes the recorded calls and answer`, async () => {
        const recorded = invocation.request;
        const request = { ...recorded, invocationId: `inv-${n}`, api: { ...recorded.api, token: "t" } };
        const canon = Canon.seeded(request);
        const scripted = new ScriptedTransport([...invocation.calls], canon);
        const app = makeApp({ signingKey: KEY, transportFactory: () => scripted, deploymentId: undefined });
        const raw = new TextEncoder().encode(JSON.stringify(request));
        const timestamp = String(Math.trunc(Date.now() / 1000));
        const headers = await signedHeaders(KEY, timestamp, raw, { path: "/", invocation: `inv-${n}/1` });
        const answer = await app.fetch(new Request("http://app.invalid/", { method: "POST", body: raw, headers }));
        const text = await answer.text();
        assert.equal(answer.status, 200, text);
        assert.deepEqual(scripted.problems, []);
        assert.deepEqual(scripted.calls, [], "recorded step calls the SDK did not make");
        assert.deepStrictEqual(canon.toCanonical(JSON.parse(text)), invocation.answer);
      });
    });
  });
}
