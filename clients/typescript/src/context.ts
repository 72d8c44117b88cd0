/**
 * Run and step ids, set by the orchestrator and sent on every call made inside them.
 *
 * The gateway scopes `run`/`step` intents by these ids and flags the same intent in two
 * runs, so they must come from the orchestrator, never from tool arguments a model
 * writes. They live in an `AsyncLocalStorage`: every promise, timer and callback started
 * inside `run("run-42", () => ...)` carries them, and nothing outside it sees them.
 *
 * `node:async_hooks` is loaded only where the runtime has it (Node, Deno, Bun, workers
 * with Node compatibility). Elsewhere `run` and `step` throw, and the ids are passed to
 * each call instead (`runId`/`stepId` options).
 */

import type { AsyncLocalStorage } from "node:async_hooks";

/** The run and step ids in force (null where the orchestrator set none). */
export interface RunContext {
  readonly runId: string | null;
  readonly stepId: string | null;
}

const EMPTY: RunContext = { runId: null, stepId: null };

const storage: AsyncLocalStorage<RunContext> | null = await import("node:async_hooks").then(
  (m) => new m.AsyncLocalStorage<RunContext>(),
  () => null,
);

function requireStorage(): AsyncLocalStorage<RunContext> {
  if (storage === null) {
    throw new TypeError("this runtime has no node:async_hooks AsyncLocalStorage: pass runId/stepId to each call instead");
  }
  return storage;
}

/**
 * Refuses a value the gateway would refuse (1 to 255 visible ASCII characters). Checked
 * where the id is set, so a bad run id fails in the orchestrator's code and not as a 400
 * on some later tool call.
 */
export function checkHeaderValue(name: string, value: string): string {
  if (typeof value !== "string") throw new TypeError(`${name} must be a string, not ${typeof value}`);
  if (value.length === 0 || value.length > 255 || !/^[!-~]+$/.test(value)) {
    throw new RangeError(`${name} must be 1 to 255 visible ASCII characters, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Runs `fn` with `Oncegate-Run-Id: runId` (and `Oncegate-Step-Id` when `options.step` is
 * given) sent on every claim, call and key derivation it makes, however deep and however
 * asynchronous. A nested `run` replaces both ids (a new run has no step of the old one).
 */
export function run<T>(runId: string, fn: () => T, options: { step?: string } = {}): T {
  checkHeaderValue("run id", runId);
  if (options.step !== undefined) checkHeaderValue("step id", options.step);
  return requireStorage().run({ runId, stepId: options.step ?? null }, fn);
}

/** Runs `fn` with the step id set, keeping the run id in force. */
export function step<T>(stepId: string, fn: () => T): T {
  checkHeaderValue("step id", stepId);
  return requireStorage().run({ runId: current().runId, stepId }, fn);
}

/** The run and step ids a call made here would send. */
export function current(): RunContext {
  return storage?.getStore() ?? EMPTY;
}
