/**
 * `protect()`: a function that performs an effect, run at most once per intent.
 *
 * The order of things is the point. The function runs only after the gateway granted a
 * claim, and not at all when the lease ran out before it could start; its lease is kept
 * alive by a timer while it runs; its outcome is recorded before the caller sees it (the
 * completion retried on transport errors and 503); an error is recorded as `unknown`
 * unless it proves nothing left (notSent.ts); and a replay resolves to the stored result
 * without calling the function at all.
 */

import {
  CompletionNotRecorded,
  GatewayError,
  OncegateError,
  OutcomeError,
  StaleClaim,
  errorForOutcome,
} from "./errors.js";
import { Execute, Outcome, PassThrough, type ClaimAnswer, type CompletionOutcome, type JsonObject } from "./models.js";
import { isNotSent, type ErrorClass, type NotSentPredicate } from "./notSent.js";
import type { CompletionRecord, DecisionOptions } from "./wire.js";

/** Where warnings go. */
export interface Logger {
  warn(message: string): void;
  error(message: string): void;
}

/** What `protect()` needs of a client: the two-phase API. */
export interface Gate {
  readonly logger: Logger;
  claim(capability: string, args?: JsonObject, options?: DecisionOptions): Promise<ClaimAnswer>;
  complete(claim: Execute, outcome: CompletionOutcome, record?: CompletionRecord): Promise<Outcome>;
  heartbeat(claim: Execute, options?: { timeoutMs?: number }): Promise<Execute>;
}

/** What the protected function is handed as its last argument. */
export interface ProtectContext {
  /** Send this to the provider as its idempotency key (`Idempotency-Key`). */
  readonly idempotencyKey: string;
  /** The oncegate intent key. */
  readonly intentKey: string;
  /** The claim this execution holds, as first granted. */
  readonly claim: Execute;
  /** Aborted when a heartbeat finds the claim lost: pass it to fetch to stop early. */
  readonly signal: AbortSignal;
  /** Milliseconds of lease left, by the latest heartbeat. */
  leaseLeftMs(): number;
}

/** Options of `protect()`. `P` are the protected function's parameters, `R` what it resolves to. */
export interface ProtectOptions<P extends unknown[], R> {
  /**
   * The capability arguments of one call. Default: the call's single argument, which must
   * then be a plain object (`chargeCard({ orderId, amount })`).
   */
  arguments?: (...args: P) => JsonObject;
  /** Where the effect's reference is: a JSON pointer into the stored result (default `/id`), or a function of the value. */
  effectRef?: string | ((value: R) => string | number | null | undefined);
  /** What to store as the result (default: the value itself, as JSON). */
  result?: (value: R) => unknown;
  /** What a replay resolves to, from the stored result (default: the stored result). */
  fromResult?: (stored: unknown) => R;
  /** Which errors prove nothing was sent (default: notSent.isNotSent): a predicate, or classes added to the default. */
  notSent?: NotSentPredicate | readonly ErrorClass[];
  /** Keep the lease alive with heartbeats while the function runs (default true). */
  heartbeat?: boolean;
}

/**
 * Where a protected function keeps what the framework adapters (`oncegate/ai-sdk`,
 * `oncegate/openai-agents`, `oncegate/langgraph`) need: they claim before the framework
 * decides to run the tool, so that a held call pauses the run the framework's way, and
 * hand that claim to the execution.
 */
export const PROTECTED: unique symbol = Symbol.for("oncegate.protected");

/** What the framework adapters read from a protected function. */
export interface ProtectedInternals<P extends unknown[], R> {
  readonly gate: Gate;
  readonly capability: string;
  /** The capability arguments of a call with `args`. */
  capabilityArguments(...args: P): JsonObject;
  /** One protected call; `first` is a claim answer already asked for these arguments. */
  run(args: P, first?: ClaimAnswer): Promise<R>;
}

/** What `protect()` returns: `fn`'s parameters (without the context) and result, as a promise. */
export type ProtectedFunction<P extends unknown[], R> = ((...args: P) => Promise<R>) & {
  readonly [PROTECTED]: ProtectedInternals<P, R>;
};

/** The internals of a protected function; a TypeError for any other value. */
export function protectedInternals<P extends unknown[], R>(fn: (...args: P) => Promise<R>): ProtectedInternals<P, R> {
  const internals = (fn as Partial<ProtectedFunction<P, R>>)[PROTECTED];
  if (internals === undefined) throw new TypeError(`${fn.name || "this function"} is not protected: wrap it with gate.protect(...) first`);
  return internals;
}

const RESULT_REFUSED = [400, 413, 422];
const MAX_ERROR_TEXT = 2000;
/** The shortest heartbeat interval, so a lease that looks expired is not hammered. */
const MIN_BEAT_MS = 100;

/** `Client.protect`, given the client. */
export function protectFunction<P extends unknown[], R>(
  gate: Gate,
  capability: string,
  fn: (...args: [...P, ProtectContext]) => R,
  options: ProtectOptions<P, Awaited<R>>,
): ProtectedFunction<P, Awaited<R>> {
  if (!capability) throw new TypeError("protect() needs the capability's name");
  if (typeof fn !== "function") throw new TypeError("protect() needs the function that performs the effect");
  if (typeof options.effectRef === "string" && options.effectRef && !options.effectRef.startsWith("/")) {
    throw new TypeError(`effectRef ${JSON.stringify(options.effectRef)} is not a JSON pointer (like "/id")`);
  }
  if (options.arguments === undefined && fn.length > 2) {
    throw new TypeError(
      `protect(${capability}): ${fn.name || "the function"} takes ${fn.length - 1} arguments; ` +
        "pass arguments: (...args) => ({ ... }) to name the capability arguments",
    );
  }
  const spec: Spec<P, Awaited<R>> = { gate, capability, fn: fn as Spec<P, Awaited<R>>["fn"], options, isNotSent: notSentRule(options.notSent) };
  const protectedFn = (...args: P): Promise<Awaited<R>> => runProtected(spec, args);
  Object.defineProperty(protectedFn, "name", { value: fn.name || capability });
  const internals: ProtectedInternals<P, Awaited<R>> = {
    gate,
    capability,
    capabilityArguments: (...args: P) => capabilityArguments(spec, args),
    run: (args, first) => runProtected(spec, args, first),
  };
  Object.defineProperty(protectedFn, PROTECTED, { value: internals });
  return protectedFn as ProtectedFunction<P, Awaited<R>>;
}

interface Spec<P extends unknown[], R> {
  readonly gate: Gate;
  readonly capability: string;
  readonly fn: (...args: unknown[]) => R | Promise<R>;
  readonly options: ProtectOptions<P, R>;
  readonly isNotSent: NotSentPredicate;
}

function notSentRule(rule: ProtectOptions<never[], unknown>["notSent"]): NotSentPredicate {
  if (rule === undefined) return isNotSent;
  if (typeof rule === "function") return rule;
  const extra = [...rule];
  return (error) => extra.some((c) => error instanceof c) || isNotSent(error);
}

async function runProtected<P extends unknown[], R>(spec: Spec<P, R>, args: P, first?: ClaimAnswer): Promise<R> {
  const { gate, capability } = spec;
  const claimArgs = capabilityArguments(spec, args);
  let answer = first ?? (await gate.claim(capability, claimArgs));
  if (answer instanceof Outcome && answer.status === "approved") {
    // An approval decided for a claim-only capability: the next claim executes.
    answer = await gate.claim(capability, claimArgs);
    // Never a success: nothing was executed and the function must not run.
    if (answer instanceof Outcome && answer.status === "approved") throw new OutcomeError(answer);
  }
  if (answer instanceof PassThrough) return spec.fn(...withContext(spec, args, passThroughContext(capability)));
  if (answer instanceof Outcome) {
    const err = errorForOutcome(answer);
    if (err !== null) throw err;
    return spec.options.fromResult ? spec.options.fromResult(answer.result) : (answer.result as R);
  }
  if (answer.tooLateToSend()) {
    // This process paused between the claim and the call for (nearly) the whole lease:
    // the claim may be another attempt's already, and a request sent now would race it
    // where no fence can stop it (the gateway never sees it). Send nothing, and say so.
    await gate.complete(answer, "not_sent", { error: "the lease ran out before the effect was sent" }).catch(() => undefined);
    throw new StaleClaim(
      `the claim on ${answer.intentKey} expired before ${spec.fn.name || capability} was called; ` +
        "nothing was sent: call again to see where the intent stands",
      { intentKey: answer.intentKey },
    );
  }
  return execute(spec, args, answer);
}

async function execute<P extends unknown[], R>(spec: Spec<P, R>, args: P, claim: Execute): Promise<R> {
  const beat = new Heartbeat(spec.gate, claim);
  if (spec.options.heartbeat !== false) beat.start();
  let value: R;
  try {
    value = await spec.fn(...withContext(spec, args, beat.context()));
  } catch (err) {
    const latest = await beat.stop();
    const outcome = failureOutcome(spec.isNotSent, err);
    try {
      await spec.gate.complete(latest, outcome, { error: errorText(err) });
    } catch (recordErr) {
      if (!(recordErr instanceof OncegateError)) throw recordErr;
      spec.gate.logger.error(`oncegate: recording ${outcome} for ${latest.intentKey} failed: ${recordErr.message}`);
    }
    throw err;
  }
  const latest = await beat.stop();
  const [ref, stored, problem] = appliedRecord(spec.options, value);
  let trouble = problem;
  try {
    try {
      await spec.gate.complete(latest, "applied", { effectRef: ref, result: stored });
    } catch (err) {
      if (!(err instanceof GatewayError) || err instanceof StaleClaim || stored === null || !RESULT_REFUSED.includes(err.statusCode)) throw err;
      // The gateway refused the result itself (too large, a number it cannot hold
      // exactly): the effect happened all the same, so record it without.
      await spec.gate.complete(latest, "applied", { effectRef: ref });
      trouble = new TypeError(`the gateway refused to store the result: ${err.toString()}`);
    }
  } catch (err) {
    if (err instanceof StaleClaim || err instanceof CompletionNotRecorded) {
      err.value = value;
      if (err instanceof StaleClaim && beat.lost !== null) {
        err.message = `the claim on ${latest.intentKey} was lost while the function ran: ${beat.lost.message}`;
      }
    }
    throw err;
  }
  if (trouble !== null) {
    throw new TypeError(
      `${spec.fn.name || spec.capability} returned a value that could not be stored (${String(trouble)}); ` +
        "the effect was recorded as applied without a result: pass result to convert or trim it",
      { cause: trouble },
    );
  }
  return value;
}

/** The capability arguments of one call: `arguments(...)`, or the call's single plain object. */
function capabilityArguments<P extends unknown[], R>(spec: Spec<P, R>, args: P): JsonObject {
  const made: unknown = spec.options.arguments ? spec.options.arguments(...args) : args.length === 1 ? args[0] : undefined;
  if (!isPlainObject(made)) {
    throw new TypeError(
      spec.options.arguments
        ? `protect(${spec.capability}): arguments must return an object of capability argument names to values`
        : `protect(${spec.capability}): call it with one object of capability arguments, or pass arguments: (...args) => ({ ... })`,
    );
  }
  return made;
}

/** The arguments to call `fn` with: the caller's, then the context (after any left out). */
function withContext<P extends unknown[], R>(spec: Spec<P, R>, args: P, ctx: ProtectContext): unknown[] {
  const at = Math.max(args.length, spec.fn.length - 1);
  const out: unknown[] = [...args];
  out.length = at;
  out.push(ctx);
  return out;
}

function passThroughContext(capability: string): ProtectContext {
  const none = (): never => {
    throw new TypeError(`${capability} is a read (pass_through): it has no intent and no idempotency key`);
  };
  return {
    get idempotencyKey(): string {
      return none();
    },
    get intentKey(): string {
      return none();
    },
    get claim(): Execute {
      return none();
    },
    signal: new AbortController().signal,
    leaseLeftMs: () => Number.POSITIVE_INFINITY,
  };
}

/** `not_sent` only on proof that nothing left; `unknown` for anything else. */
export function failureOutcome(rule: NotSentPredicate, error: unknown): CompletionOutcome {
  try {
    return rule(error) ? "not_sent" : "unknown";
  } catch {
    // A broken custom rule must never turn an unknown into a not_sent.
    return "unknown";
  }
}

/** What the gateway stores as the attempt's error: the name and message (and fetch's cause code), bounded. */
export function errorText(error: unknown): string {
  const code = error instanceof Error ? (error.cause as { code?: unknown } | undefined)?.code : undefined;
  const text =
    error instanceof Error ? `${error.name}: ${error.message}${typeof code === "string" ? ` (${code})` : ""}` : `thrown: ${String(error)}`;
  return text.length <= MAX_ERROR_TEXT ? text : `${text.slice(0, MAX_ERROR_TEXT - 3)}...`;
}

/**
 * (effect ref, result JSON, conversion error) to record for a return value. The effect
 * happened whatever the conversion says, so a result or reference that cannot be taken
 * is recorded as applied without it, and the error is thrown after the record: the
 * truth is kept, and the bug is loud. Never throws.
 */
function appliedRecord<P extends unknown[], R>(options: ProtectOptions<P, R>, value: R): [string | null, unknown, unknown] {
  let problem: unknown = null;
  let stored: unknown = null;
  try {
    const chosen = options.result ? options.result(value) : value;
    stored = chosen === undefined ? null : (JSON.parse(JSON.stringify(chosen)) as unknown);
  } catch (err) {
    stored = null;
    problem = err;
  }
  let ref: string | null = null;
  const rule = options.effectRef ?? "/id";
  try {
    if (typeof rule === "function") {
      const raw = rule(value);
      ref = raw === null || raw === undefined ? null : String(raw);
    } else if (rule && stored !== null) {
      ref = effectRefAt(stored, rule);
    }
  } catch (err) {
    ref = null;
    problem = problem ?? err;
  }
  return [ref, stored, problem];
}

/** The reference at a JSON pointer: a string or integer, else none (an effect without an id is still applied). */
export function effectRefAt(document: unknown, pointer: string): string | null {
  let node: unknown = document;
  for (const raw of pointer.split("/").slice(1)) {
    const token = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(node) && /^(0|[1-9]\d*)$/.test(token)) node = node[Number(token)];
    else if (isPlainObject(node) && Object.hasOwn(node, token)) node = node[token];
    else return null;
  }
  if (typeof node === "string") return node || null;
  if (typeof node === "number" && Number.isInteger(node)) return String(node);
  return null;
}

function isPlainObject(value: unknown): value is JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/**
 * Keeps a claim's lease alive from a timer while the effect runs. Beats every third of
 * the lease LEFT (so two may fail before it runs out, and a late claim or a failed beat
 * makes the next come sooner), each with a timeout shorter than an interval so a hung
 * request cannot use up the lease. A 409 means the claim was lost: beating stops, the
 * context's signal aborts, and the completion will be refused too (`StaleClaim`).
 */
class Heartbeat {
  claim: Execute;
  lost: StaleClaim | null = null;
  private readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private inFlight: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly gate: Gate,
    first: Execute,
  ) {
    this.claim = first;
  }

  context(): ProtectContext {
    const first = this.claim;
    return {
      idempotencyKey: first.idempotencyKey,
      intentKey: first.intentKey,
      claim: first,
      signal: this.controller.signal,
      leaseLeftMs: () => this.claim.leaseLeftMs(),
    };
  }

  start(): void {
    this.schedule();
  }

  /** Stops beating (waiting for a beat in progress) and answers the latest claim. */
  async stop(): Promise<Execute> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.inFlight !== null) await this.inFlight;
    return this.claim;
  }

  private schedule(): void {
    if (this.stopped) return;
    const interval = Math.max(MIN_BEAT_MS, this.claim.leaseLeftMs() / 3);
    this.timer = setTimeout(() => {
      this.inFlight = this.beat().finally(() => {
        this.inFlight = null;
        this.schedule();
      });
    }, interval);
    // The effect's own work keeps the process alive; a beat alone must not.
    this.timer.unref?.();
  }

  private async beat(): Promise<void> {
    try {
      this.claim = await this.gate.heartbeat(this.claim, { timeoutMs: Math.max(500, this.claim.leaseMs / 6) });
    } catch (err) {
      if (err instanceof StaleClaim) {
        this.lost = err;
        this.stopped = true;
        this.controller.abort(err);
        this.gate.logger.warn(`oncegate: claim on ${this.claim.intentKey} lost: ${err.message}`);
      } else {
        this.gate.logger.warn(`oncegate: heartbeat for ${this.claim.intentKey} failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
}
