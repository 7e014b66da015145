/**
 * The golden workflows of tests/golden/workflows.py, written with the TypeScript SDK: the same
 * names, steps and outcomes, so each recorded request, played to them with the recorded
 * answers to their step calls, must make the recorded calls and give the recorded answer.
 */

import { NonRetryableError, PushApp, workflow, type PushAppOptions, type StepContext } from "../../src/index.js";

/** The names the Python workflows' errors have in the recordings. */
class CardDeclinedError extends Error {
  override name = "CardDeclinedError";
}

class RuntimeError extends Error {
  override name = "RuntimeError";
}

/** Fails on the first attempt, succeeds on the next (decided by the attempt, not a counter). */
function flaky<T>(value: T, step: StepContext): T {
  if (step.attempt === 1) throw new RuntimeError("first attempt fails");
  return value;
}

const sequence = workflow("golden-sequence", async ({ step }) => {
  const user = await step.run("load-user", () => ({ email: "a@example.invalid" }));
  await step.run("welcome-email", () => "sent");
  return step.run("follow-up", () => user.email);
});

const sleep = workflow("golden-sleep", async ({ step }) => {
  const first = await step.run("before", () => 1);
  await step.sleep("nap", "1h");
  const second = await step.run("after", () => 2);
  return first + second;
});

const retry = workflow("golden-retry", async ({ step }) => step.run("flaky", (s) => flaky("ok", s), { retries: 2 }));

const failure = workflow("golden-failure", async ({ step }) => {
  await step.run("charge", () => "charged");
  throw new CardDeclinedError("Card declined");
});

const stepFailure = workflow("golden-step-failure", async ({ step }) => {
  try {
    await step.run(
      "give-up",
      () => {
        throw new NonRetryableError("no point retrying");
      },
      { retries: 3 },
    );
  } catch (error) {
    return { caught: (error as Error).name }; // the workflow sees the step's failure as StepError
  }
  return { caught: null };
});

const values = workflow("golden-values", async ({ step }) => {
  const token = await step.uuid("token");
  await step.now("started");
  return step.run("use", () => token.length);
});

const gather = workflow("golden-gather", async ({ step }) => {
  const [a, b] = await Promise.all([step.run("a", () => "A"), step.run("b", () => "B")]);
  return step.run("join", () => a + b);
});

const child = workflow("golden-child", async ({ step }) => {
  const result = await step.invoke("call-child", { workflow: "golden-sequence", input: {} });
  return { child: result };
});

/** An input and a step result over 64 KiB, kept in S3: from protocol 1.5 the replay's request
 * gives them as references, which the SDK reads. */
const large = workflow("golden-large", async ({ input, step }) => {
  const big = await step.run("big", () => "x".repeat(70_000));
  await step.sleep("nap", "1h");
  return [(input as string).length, big.length];
});

export const WORKFLOWS = [sequence, sleep, retry, failure, stepFailure, values, gather, child, large];

export function makeApp(options: PushAppOptions): PushApp {
  return new PushApp(WORKFLOWS, options);
}
