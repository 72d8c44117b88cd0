/**
 * The client: the two-phase API (claim, complete, heartbeat), the gateway-executed call,
 * key derivation, approvals, and `protect()` (in protect.ts), over `fetch` alone.
 */
import { Execute, Outcome, type ClaimAnswer, type CompletionOutcome, type JsonObject, type KeyExplanation } from "./models.js";
import { type Gate, type Logger, type ProtectContext, type ProtectedFunction, type ProtectOptions } from "./protect.js";
import { type CompletionRecord, type DecisionOptions } from "./wire.js";
/** Milliseconds per request: a claim may wait for the gateway to reconcile an earlier attempt. */
export declare const DEFAULT_TIMEOUT_MS = 30000;
export interface ClientOptions {
    /** The bearer token: the principal (agent, approver, admin) comes from it alone. */
    token: string;
    /** Milliseconds per request (default 30 000). */
    timeoutMs?: number;
    /** How many times a completion is retried on a transport error or a 5xx (default 4). */
    completeRetries?: number;
    /** Extra headers sent with every request. */
    headers?: Record<string, string>;
    /** The `fetch` to use (default: the global one). */
    fetch?: typeof fetch;
    /** Where warnings go (a heartbeat that failed, a completion retried); default `console`. */
    logger?: Logger;
}
export interface CompleteOptions extends CompletionRecord {
    /** With an intent key instead of the `Execute`: the claim's fencing token. */
    fencingToken?: string;
    /** Overrides the client's `completeRetries` for this completion. */
    retries?: number;
}
/**
 * A connection to one oncegate gateway, as one principal (the token's).
 *
 * ```ts
 * const gate = new Client("http://127.0.0.1:7878", { token: process.env.ONCEGATE_TOKEN! });
 * ```
 */
export declare class Client implements Gate {
    readonly url: string;
    readonly timeoutMs: number;
    readonly completeRetries: number;
    readonly logger: Logger;
    private readonly wire;
    private readonly fetchImpl;
    constructor(url: string, options: ClientOptions);
    /**
     * Asks to execute `capability` with `args`: the decision, before any effect. Answers
     * `Execute` (run the effect with its `idempotencyKey`, then `complete`), `PassThrough`
     * (a read: just run it) or the `Outcome` envelope (replayed, in_flight, unknown, ...:
     * do not execute). Throws `GatewayUnavailable` when the gateway cannot be reached
     * (nothing was claimed for you) and `GatewayError` when it refuses the request.
     */
    claim(capability: string, args?: JsonObject, options?: DecisionOptions): Promise<ClaimAnswer>;
    /**
     * Records what happened to a claimed execution; answers what was recorded.
     * `outcome`: `applied` (with `effectRef` and `result`), `failed` (the provider said no),
     * `unknown` (it may have happened) or `not_sent` (proof that nothing left). Retried
     * with backoff when the gateway is unreachable or answers 5xx (a repeat answers what
     * was recorded). Throws `StaleClaim` when the claim was lost (nothing recorded) and
     * `CompletionNotRecorded` when every try failed.
     */
    complete(claim: Execute | string, outcome: CompletionOutcome, options?: CompleteOptions): Promise<Outcome>;
    /** Extends the lease of a claim you hold; answers the claim with its new lease. Throws `StaleClaim` when it is no longer yours. */
    heartbeat(claim: Execute | string, options?: {
        fencingToken?: string;
        timeoutMs?: number;
    }): Promise<Execute>;
    /** `POST /v1/calls`: the gateway decides and executes its own upstream. Answers every envelope (`raiseForStatus()` throws for non-successes). */
    call(capability: string, args?: JsonObject, options?: DecisionOptions): Promise<Outcome>;
    /** The intent key these arguments make, and which inputs entered it. */
    deriveKey(capability: string, args?: JsonObject, options?: Omit<DecisionOptions, "idempotencyKey">): Promise<KeyExplanation>;
    /** The stored intent record (approver and admin tokens only). */
    getIntent(intentKey: string): Promise<JsonObject>;
    /** What an approver weighs: the held call's arguments, digest, rendered request, why it is held (approver and admin tokens). */
    getApproval(approvalId: string): Promise<JsonObject>;
    /** Approves a held call (approver tokens); answers its outcome. */
    approve(approvalId: string): Promise<Outcome>;
    /** Denies a held call (approver tokens); answers its outcome. */
    deny(approvalId: string): Promise<Outcome>;
    /**
     * Makes `fn`, which performs `capability`'s effect, run at most once per intent; see
     * protect.ts. The returned function takes `fn`'s parameters without its last one (the
     * `ProtectContext` oncegate passes in, with the `idempotencyKey`) and resolves to what
     * `fn` returns, or, on a replay, to the stored result.
     */
    protect<P extends unknown[], R>(capability: string, fn: (...args: [...P, ProtectContext]) => R, options?: ProtectOptions<P, Awaited<R>>): ProtectedFunction<P, Awaited<R>>;
    private send;
}
/** The request body; NaN and Infinity are not JSON, and the gateway is strict. */
export declare function encode(body: unknown): string;
/** An error in one line, with the direct cause's code (`TypeError: fetch failed (ECONNREFUSED)`). */
export declare function describe(err: unknown): string;
