/** Serving a push app: signatures as the protocol says, each adapter's request shapes, and
 * deployment IDs as the docs say. */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";

import { PushApp, detectDeploymentId, workflow } from "../src/index.js";
import { signV1, signedHeaders } from "../src/signing.js";

const KEY = "serving-key";
const hello = workflow("hello", async ({ input }) => `hello ${input.name}`);
const encoder = new TextEncoder();

function invokeBody(): string {
  return JSON.stringify({
    protocol: "1.5",
    type: "invoke",
    invocationId: "inv-9",
    run: { id: "run-9", appId: "app", workflow: "hello", input: { name: "ts" }, attempt: 1, status: "running" },
    steps: [],
    api: { url: "http://127.0.0.1:1", token: "t" },
  });
}

async function signed(body: string, path = "/", invocation = "inv-9/3", ts = Math.trunc(Date.now() / 1000)) {
  return signedHeaders(KEY, String(ts), encoder.encode(body), { path, invocation });
}

async function post(app: PushApp, url: string, body: string, headers: Record<string, string>) {
  const answer = await app.fetch(new Request(url, { method: "POST", body, headers }));
  return { status: answer.status, body: (await answer.json()) as Record<string, any> };
}

describe("signatures", () => {
  const app = new PushApp([hello], { signingKey: KEY, deploymentId: "dep-1" });

  test("a signed invoke runs; sync lists the workflows", async () => {
    const ran = await post(app, "http://app.invalid/", invokeBody(), await signed(invokeBody()));
    assert.deepEqual(ran, { status: 200, body: { protocol: "1.5", deploymentId: "dep-1", outcome: "completed", output: "hello ts" } });
    const sync = JSON.stringify({ protocol: "1.5", type: "sync" });
    const synced = await post(app, "http://app.invalid/", sync, await signedHeaders(KEY, String(Math.trunc(Date.now() / 1000)), encoder.encode(sync)));
    assert.equal(synced.status, 200);
    assert.deepEqual(synced.body.workflows, [{ name: "hello" }]);
    assert.match(synced.body.sdk, /^ezgh-workflows-typescript\//);
    assert.equal(synced.body.protocol, "1.5", "the sync answer says the newest version the SDK speaks");
  });

  const refusals: Array<[string, () => Promise<[string, Record<string, string>, string?]>]> = [
    ["another path", async () => ["http://app.invalid/other", await signed(invokeBody())]],
    ["another invocation", async () => ["http://app.invalid/", await signed(invokeBody(), "/", "inv-8/3")]],
    ["a stale timestamp", async () => ["http://app.invalid/", await signed(invokeBody(), "/", "inv-9/3", Math.trunc(Date.now() / 1000) - 301)]],
    ["a v1 signature alone", async () => {
      const ts = String(Math.trunc(Date.now() / 1000));
      const v1 = await signV1(KEY, ts, encoder.encode(invokeBody()));
      return ["http://app.invalid/", { "x-ezgh-timestamp": ts, "x-ezgh-signature": v1, "x-ezgh-invocation": "inv-9/3" }];
    }],
    ["a changed body", async () => ["http://app.invalid/", await signed(invokeBody()), invokeBody().replace('"ts"', '"xx"')]],
  ];
  for (const [what, make] of refusals) {
    test(`${what} is 401 unauthorized`, async () => {
      const [url, headers, body] = await make();
      const answer = await post(app, url, body ?? invokeBody(), headers);
      assert.equal(answer.status, 401);
      assert.equal(answer.body.error.code, "unauthorized");
    });
  }

  test("no signing key configured is 401, with what to do", async () => {
    const saved = process.env.EZGH_SIGNING_KEY;
    delete process.env.EZGH_SIGNING_KEY;
    try {
      const answer = await post(new PushApp([hello]), "http://app.invalid/", invokeBody(), await signed(invokeBody()));
      assert.equal(answer.status, 401);
      assert.match(answer.body.error.message, /EZGH_SIGNING_KEY/);
    } finally {
      if (saved !== undefined) process.env.EZGH_SIGNING_KEY = saved;
    }
  });

  test("GET describes; other methods are 405; an unknown workflow fails the run", async () => {
    const described = await app.fetch(new Request("http://app.invalid/"));
    assert.equal(described.status, 200);
    assert.equal(((await described.json()) as { workflows: number }).workflows, 1);
    assert.equal((await app.fetch(new Request("http://app.invalid/", { method: "PUT", body: "{}" }))).status, 405);
    const body = invokeBody().replace('"workflow":"hello"', '"workflow":"gone"');
    const answer = await post(app, "http://app.invalid/", body, await signed(body));
    assert.equal(answer.body.error.code, "workflows.unknown_workflow");
  });
});

describe("the Lambda handler", () => {
  const app = new PushApp([hello], { signingKey: KEY, deploymentId: "dep-1" });

  test("takes a function URL event, base64 or not, and an API Gateway REST (v1) event", async () => {
    const body = invokeBody();
    const headers = await signed(body, "/prod/ezgh");
    const url = await app.lambdaHandler({
      rawPath: "/prod/ezgh",
      headers,
      requestContext: { http: { method: "POST", path: "/prod/ezgh" } },
      body: Buffer.from(body).toString("base64"),
      isBase64Encoded: true,
    });
    assert.equal(url.statusCode, 200, url.body);
    assert.equal(JSON.parse(url.body).output, "hello ts");
    const mixedCase = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
    const rest = await app.lambdaHandler({ httpMethod: "POST", path: "/prod/ezgh", headers: mixedCase, body, isBase64Encoded: false });
    assert.equal(rest.statusCode, 200, rest.body);
  });

  test("a malformed event is 400 validation_error", async () => {
    const answer = await app.lambdaHandler({ rawPath: "/", body: "!!", isBase64Encoded: true, requestContext: { http: { method: "POST" } } });
    assert.equal(answer.statusCode, 400);
    assert.equal((await app.lambdaHandler({} as never)).statusCode, 400);
  });
});

describe("the Node handler", () => {
  test("serves node:http, and says what to do when a body parser ran first", async () => {
    const app = new PushApp([hello], { signingKey: KEY });
    let parsedFirst = false;
    const server = createServer((req, res) => {
      if (parsedFirst) {
        req.resume();
        req.on("end", () => {
          Object.assign(req, { body: {} });
          void app.nodeHandler(req, res);
        });
        return;
      }
      void app.nodeHandler(req, res);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const body = invokeBody();
      const ok = await fetch(`${base}/hooks/ezgh?x=1`, { method: "POST", body, headers: await signed(body, "/hooks/ezgh") });
      assert.equal(ok.status, 200);
      assert.equal(((await ok.json()) as { output: string }).output, "hello ts");
      parsedFirst = true;
      const refused = await fetch(`${base}/hooks/ezgh`, { method: "POST", body, headers: await signed(body, "/hooks/ezgh") });
      assert.equal(refused.status, 400);
      assert.match(((await refused.json()) as { error: { message: string } }).error.message, /express\.raw/);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("deployment IDs", () => {
  const cases: Array<[Record<string, string>, string | null]> = [
    [{ EZGH_DEPLOYMENT_ID: "mine", VERCEL_DEPLOYMENT_ID: "dpl_1" }, "mine"],
    [{ VERCEL_DEPLOYMENT_ID: "dpl_1" }, "dpl_1"],
    [{ AWS_LAMBDA_FUNCTION_NAME: "fn", AWS_LAMBDA_FUNCTION_VERSION: "7" }, "fn:7"],
    [{ K_SERVICE: "svc", K_REVISION: "svc-0001" }, "svc:svc-0001"],
    [{ FLY_APP_NAME: "app", FLY_MACHINE_VERSION: "v9" }, "app:v9"],
    [{ FLY_APP_NAME: "app", FLY_IMAGE_REF: "registry/app:deploy" }, "app:registry/app:deploy"],
    [{ RENDER_SERVICE_ID: "srv", RENDER_GIT_COMMIT: "abc" }, "srv:abc"],
    [{ RENDER_DEPLOY_ID: "dep" }, "dep"],
    [{}, null],
  ];
  for (const [env, expected] of cases) {
    test(`${JSON.stringify(env)} → ${expected}`, () => assert.equal(detectDeploymentId(env), expected));
  }
});
