/** The SDK's own rules, one invocation at a time: step identity, duplicate names, replay
 * failing closed, suspension, cancellation, the JSON value rules, retries. */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { NonRetryableError, RunCancelledError, StepError, workflow } from "../src/index.js";
import {
  CUT_MARK,
  DEFAULT_RETRIES,
  MAX_ERROR_FIELD_BYTES,
  MAX_ERROR_MESSAGE_BYTES,
  MAX_RETRIES,
  RUN_ENDED_STATUSES,
  STEP_ENDED_STATUSES,
  clip,
} from "../src/protocol/rules.js";
import { invoke, NotingTransport, recorded } from "./support.js";

describe("step identity", () => {
  test("a name counts its uses; an explicit id names one step", async () => {
    const wf = workflow("ids", async ({ step }) => {
      for (let i = 0; i < 3; i++) await step.run("send", () => i);
      await step.run("send", () => "x", { id: "send-x" });
      return "done";
    });
    const { answer, transport } = await invoke(wf);
    assert.equal(answer.outcome, "completed");
    const starts = transport.ops.filter((op) => op.op === "start").map((op) => op.stepId);
    assert.deepEqual(starts, ["send#1", "send#2", "send#3", "send-x"]);
  });

  test("the same explicit id twice fails the run with workflows.duplicate_step_name", async () => {
    const wf = workflow("dup-id", async ({ step }) => {
      await step.run("a", () => 1, { id: "same" });
      await step.run("b", () => 2, { id: "same" });
    });
    const { answer } = await invoke(wf);
    assert.equal(answer.outcome, "failed");
    assert.equal((answer.error as { code: string }).code, "workflows.duplicate_step_name");
  });

  test("two steps of one name pending together fail the run, even when the workflow catches it", async () => {
    const wf = workflow("dup-pending", async ({ step }) => {
      try {
        await Promise.all([step.run("a", () => 1), step.run("a", () => 2)]);
      } catch {
        return "swallowed";
      }
    });
    const { answer, transport } = await invoke(wf);
    assert.equal((answer.error as { code: string }).code, "workflows.duplicate_step_name");
    assert.deepEqual(transport.ops, []);
  });

  test("invalid names and ids are refused at the call", () => {
    const wf = workflow("names", async ({ step }) => {
      assert.throws(() => step.run("", () => 1), RangeError);
      assert.throws(() => step.run("x".repeat(257), () => 1), RangeError);
      assert.throws(() => step.run("a\u0000b", () => 1), RangeError);
      assert.throws(() => step.run("a", () => 1, { id: "has#hash" }), RangeError);
    });
    return invoke(wf).then(({ answer }) => assert.equal(answer.outcome, "completed"));
  });
});

describe("replay", () => {
  test("a recorded step returns its recorded value without running", async () => {
    let ran = 0;
    const wf = workflow("replay", async ({ step }) => {
      const value = await step.run("load", () => ++ran);
      return { value };
    });
    const steps = [recorded({ id: "load#1", kind: "run", status: "completed", output: 41 })];
    const { answer, transport } = await invoke(wf, { steps });
    assert.deepEqual(answer.output, { value: 41 });
    assert.equal(ran, 0);
    assert.deepEqual(transport.ops, []);
  });

  test("a recorded failure throws StepError, first run and replay alike", async () => {
    const wf = workflow("replay-fail", async ({ step }) => {
      try {
        await step.run("charge", () => 1);
      } catch (error) {
        assert.ok(error instanceof StepError);
        return [error.code, error.errorName, error.message];
      }
    });
    const error = { code: "user", name: "CardDeclinedError", message: "Card declined" };
    const { answer } = await invoke(wf, { steps: [recorded({ id: "charge#1", kind: "run", status: "failed", error })] });
    assert.deepEqual(answer.output, ["user", "CardDeclinedError", "Card declined"]);
  });

  for (const [what, steps] of [
    ["a changed kind", [recorded({ id: "load#1", kind: "sleep", status: "completed" })]],
    ["a changed name under an explicit id", [recorded({ id: "load", name: "other", kind: "run", status: "completed" })]],
  ] as const) {
    test(`fails closed on ${what} (workflows.nondeterminism), whatever the workflow catches`, async () => {
      const wf = workflow("drift", async ({ step }) => {
        try {
          await step.run("load", () => 1, what.includes("explicit") ? { id: "load" } : {});
        } catch {
          return "swallowed";
        }
      });
      const { answer, transport } = await invoke(wf, { steps: [...steps] });
      assert.equal(answer.outcome, "failed");
      assert.equal((answer.error as { code: string }).code, "workflows.nondeterminism");
      assert.deepEqual(transport.ops, []);
    });
  }

  test("a value step's recorded value replays: now as the same Date, uuid as the same string", async () => {
    const wf = workflow("values", async ({ step }) => {
      const at = await step.now("at");
      const id = await step.uuid("id");
      return { at: at.toISOString(), id, isDate: at instanceof Date };
    });
    const steps = [
      recorded({ id: "at#1", kind: "value", status: "completed", output: "2026-01-02T03:04:05.006Z" }),
      recorded({ id: "id#1", kind: "value", status: "completed", output: "00000000-0000-4000-8000-000000000007" }),
    ];
    const { answer } = await invoke(wf, { steps });
    assert.deepEqual(answer.output, { at: "2026-01-02T03:04:05.006Z", id: "00000000-0000-4000-8000-000000000007", isDate: true });
  });
});

describe("suspension", () => {
  test("a try/catch around a sleep cannot swallow the suspension", async () => {
    let after = false;
    const wf = workflow("nap", async ({ step }) => {
      try {
        await step.sleep("nap", "1h30m");
      } catch {
        return "caught";
      }
      after = true;
    });
    const { answer } = await invoke(wf);
    assert.equal(answer.outcome, "suspended");
    assert.deepEqual(answer.waits, [{ stepId: "nap#1", name: "nap", kind: "sleep", seconds: 5400 }]);
    assert.equal(after, false);
  });

  test("a sleep over a year fails its step with workflows.sleep_too_long", async () => {
    const wf = workflow("long", async ({ step }) => {
      try {
        await step.sleep("forever", "53w");
      } catch (error) {
        return (error as StepError).code;
      }
    });
    const { answer, transport } = await invoke(wf);
    assert.equal(answer.output, "workflows.sleep_too_long");
    assert.equal(transport.ops[0]!.op, "reject");
  });

  test("steps awaited together suspend as parallel waits", async () => {
    const wf = workflow("fan", async ({ step }) => Promise.all([step.run("a", () => 1), step.run("b", () => 2)]));
    const { answer } = await invoke(wf);
    assert.deepEqual(answer.waits, [
      { stepId: "a#1", name: "a", kind: "run", parallel: true },
      { stepId: "b#1", name: "b", kind: "run", parallel: true },
    ]);
  });

  test("a step called inside a step's function fails the run with workflows.step_in_step", async () => {
    const wf = workflow("nested", async ({ step }) => step.run("outer", () => step.run("inner", () => 1)));
    const { answer, transport } = await invoke(wf);
    assert.equal((answer.error as { code: string }).code, "workflows.step_in_step");
    assert.deepEqual(transport.ops.map((op) => op.op), ["start"]);
  });
});

describe("cancellation", () => {
  test("a cancelling run delivers RunCancelledError once; cleanup steps run; the run ends cancelled", async () => {
    const wf = workflow("cancel", async ({ step }) => {
      try {
        await step.sleep("wait", "1d");
      } catch (error) {
        assert.ok(error instanceof RunCancelledError);
        await step.run("cleanup", () => "cleaned");
        throw error;
      }
    });
    const { answer, transport } = await invoke(wf, { status: "cancelling" });
    assert.equal(answer.outcome, "cancelled");
    assert.deepEqual(
      transport.ops.map((op) => [op.op, op.stepId]),
      [
        ["cancel", "wait#1"],
        ["start", "cleanup#1"],
      ],
    );
    assert.deepEqual(answer.ops, [{ op: "complete", stepId: "cleanup#1", output: "cleaned" }]);
  });
});

describe("values are JSON", () => {
  test("a Date becomes an ISO string and undefined null, first run and replay alike", async () => {
    const wf = workflow("json", async ({ step }) => {
      const value = await step.run("v", () => ({ at: new Date(Date.UTC(2026, 0, 1)), gone: undefined, list: [undefined, 1] }));
      const nothing = await step.run("n", () => undefined);
      return { value, nothing };
    });
    const { answer } = await invoke(wf);
    const value = { at: "2026-01-01T00:00:00.000Z", list: [null, 1] };
    assert.deepEqual(answer.output, { value, nothing: null });
    assert.deepEqual(answer.ops, [{ op: "complete", stepId: "n#1", output: null }]);
  });

  for (const [what, make] of [
    ["a function", () => ({ f: () => 1 })],
    ["a symbol", () => [Symbol("s")]],
    ["a bigint", () => 10n],
    ["a Map", () => new Map()],
    ["NaN", () => Number.NaN],
  ] as Array<[string, () => unknown]>) {
    test(`${what} fails the step at once, without retrying (workflows.invalid_value)`, async () => {
      const wf = workflow("bad", async ({ step }) => step.run("v", make));
      const { answer, transport } = await invoke(wf);
      assert.equal((answer.error as { code: string }).code, "workflows.invalid_value");
      const fail = [...transport.ops, ...((answer.ops as object[]) ?? [])].find((op) => (op as { op: string }).op === "fail");
      assert.ok(fail && !("retryable" in fail), JSON.stringify(fail));
    });
  }

  test("a result over 1 MiB fails the step with workflows.output_too_large, without retrying", async () => {
    const wf = workflow("big", async ({ step }) => step.run("v", () => "x".repeat(1_048_577)));
    const { answer } = await invoke(wf);
    assert.equal((answer.error as { code: string }).code, "workflows.output_too_large");
  });
});

describe("errors are cut to what the engine keeps", () => {
  test("a long message is cut to 8 KiB, the same on the first run as on replay", async () => {
    const long = "é".repeat(10_000); // two bytes each: a cut never splits one
    const wf = workflow("long", async ({ step }) => {
      try {
        await step.run("v", () => {
          throw new NonRetryableError(long);
        });
      } catch (error) {
        return (error as StepError).message;
      }
    });
    const { answer, transport } = await invoke(wf);
    const sent = [...transport.ops, ...((answer.ops as Array<Record<string, any>>) ?? [])].find((op) => op.op === "fail")!;
    const message = sent.error.message as string;
    assert.ok(message.endsWith(CUT_MARK) && message.startsWith("éé"));
    assert.ok(Buffer.byteLength(message) <= MAX_ERROR_MESSAGE_BYTES && Buffer.byteLength(message) > MAX_ERROR_MESSAGE_BYTES - 8);
    assert.equal(answer.output, message, "the workflow sees the error as it is recorded");
    assert.equal(clip("short", 10), "short");
    assert.equal(clip("x".repeat(300), MAX_ERROR_FIELD_BYTES).length, MAX_ERROR_FIELD_BYTES);
  });
});

describe("retries", () => {
  test("a failed attempt is sent at once, retryable with its budget; NonRetryableError is not", async () => {
    const transport = new NotingTransport((op) =>
      op.op === "fail" && op.retryable ? { stepId: op.stepId, result: "retry", retryAt: "2026-01-01T00:00:01.000Z" } : { stepId: op.stepId, result: op.op === "start" ? "started" : "ok", attempt: op.attempt },
    );
    const wf = workflow("retry", async ({ step }) => {
      await step.run("flaky", () => {
        throw new Error("boom");
      });
    });
    const { answer } = await invoke(wf, {}, transport);
    assert.equal(answer.outcome, "suspended");
    assert.deepEqual(answer.waits, [{ stepId: "flaky#1", name: "flaky", kind: "run" }]);
    const fail = transport.ops.find((op) => op.op === "fail")!;
    assert.deepEqual([fail.retryable, fail.attempt, fail.retries], [true, 1, DEFAULT_RETRIES]);

    const never = workflow("never", async ({ step }) =>
      step.run("x", () => {
        throw new NonRetryableError("no");
      }),
    );
    const done = await invoke(never);
    assert.deepEqual(done.answer.error, { code: "user", name: "NonRetryableError", message: "no" });
  });

  test("the step's function sees its attempt and an idempotency key that does not change", async () => {
    const seen: unknown[] = [];
    const wf = workflow("ctx", async ({ step }) => step.run("pay", (s) => seen.push([s.stepId, s.attempt, s.idempotencyKey])));
    const steps = [recorded({ id: "pay#1", kind: "run", status: "running", attempt: 2 })];
    const transport = new NotingTransport((op) => ({ stepId: op.stepId, result: "started", attempt: op.attempt }));
    await invoke(wf, { steps }, transport);
    assert.equal(transport.ops[0]!.attempt, 3);
    const key = createHash("sha256").update("run-1:pay#1").digest("hex");
    assert.deepEqual(seen, [["pay#1", 3, key]]);
  });
});

describe("the protocol's shared rules", () => {
  test("match the engine's core/protocol_rules.py", () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const python = readFileSync(resolve(here, "../../../shared/ezgh_engine/core/protocol_rules.py"), "utf8");
    const number = (name: string) => Number(new RegExp(`^${name} = (\\d+)`, "m").exec(python)?.[1]);
    const set = (name: string) => new Set([...new RegExp(`^${name}[^=]*= frozenset\\(\\{([^}]*)\\}`, "m").exec(python)![1]!.matchAll(/"([^"]+)"/g)].map((m) => m[1]));
    assert.equal(DEFAULT_RETRIES, number("DEFAULT_RETRIES"));
    assert.equal(MAX_RETRIES, number("MAX_RETRIES"));
    assert.deepEqual(new Set(RUN_ENDED_STATUSES), set("RUN_ENDED_STATUSES"));
    assert.deepEqual(new Set(STEP_ENDED_STATUSES), set("STEP_ENDED_STATUSES"));
    assert.equal(MAX_ERROR_FIELD_BYTES, number("MAX_ERROR_FIELD_BYTES"));
    assert.equal(MAX_ERROR_MESSAGE_BYTES, number("MAX_ERROR_MESSAGE_BYTES"));
    assert.equal(CUT_MARK, /^CUT_MARK = "([^"]*)"/m.exec(python)?.[1]);
  });
});
