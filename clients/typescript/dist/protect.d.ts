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
import { Execute, Outcome, type ClaimAnswer, type CompletionOutcome, type JsonObject } from "./models.js";
import { type ErrorClass, type NotSentPredicate } from "./notSent.js";
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
    heartbeat(claim: Execute, options?: {
        timeoutMs?: number;
    }): Promise<Execute>;
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
export declare const PROTECTED: unique symbol;
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
export declare function protectedInternals<P extends unknown[], R>(fn: (...args: P) => Promise<R>): ProtectedInternals<P, R>;
/** `Client.protect`, given the client. */
export declare function protectFunction<P extends unknown[], R>(gate: Gate, capability: string, fn: (...args: [...P, ProtectContext]) => R, options: ProtectOptions<P, Awaited<R>>): ProtectedFunction<P, Awaited<R>>;
/** `not_sent` only on proof that nothing left; `unknown` for anything else. */
export declare function failureOutcome(rule: NotSentPredicate, error: unknown): CompletionOutcome;
/** What the gateway stores as the attempt's error: the name and message (and fetch's cause code), bounded. */
export declare function errorText(error: unknown): string;
/** The reference at a JSON pointer: a string or integer, else none (an effect without an id is still applied). */
export declare function effectRefAt(document: unknown, pointer: string): string | null;
