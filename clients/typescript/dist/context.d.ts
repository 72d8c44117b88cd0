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
/** The run and step ids in force (null where the orchestrator set none). */
export interface RunContext {
    readonly runId: string | null;
    readonly stepId: string | null;
}
/**
 * Refuses a value the gateway would refuse (1 to 255 visible ASCII characters). Checked
 * where the id is set, so a bad run id fails in the orchestrator's code and not as a 400
 * on some later tool call.
 */
export declare function checkHeaderValue(name: string, value: string): string;
/**
 * Runs `fn` with `Oncegate-Run-Id: runId` (and `Oncegate-Step-Id` when `options.step` is
 * given) sent on every claim, call and key derivation it makes, however deep and however
 * asynchronous. A nested `run` replaces both ids (a new run has no step of the old one).
 */
export declare function run<T>(runId: string, fn: () => T, options?: {
    step?: string;
}): T;
/** Runs `fn` with the step id set, keeping the run id in force. */
export declare function step<T>(stepId: string, fn: () => T): T;
/** The run and step ids a call made here would send. */
export declare function current(): RunContext;
