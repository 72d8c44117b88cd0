/**
 * Requests and answers of the gateway's JSON API, without I/O: what is sent (paths,
 * bodies, headers) and how an answer is read (envelope, execute, error body, garbage),
 * decided here once, as in the Python client's `_wire`.
 */
import type { CompletionOutcome, JsonObject } from "./models.js";
/** Per-call ids: explicit ones win over those of the `run()` in force. */
export interface DecisionOptions {
    /** Sent as `Idempotency-Key`: the caller's own key, one input of the intent key. */
    idempotencyKey?: string;
    runId?: string;
    stepId?: string;
}
/** One request to send: method, path under the gateway URL, JSON body, headers. */
export interface Request {
    readonly method: "GET" | "POST";
    readonly path: string;
    readonly body: unknown;
    readonly headers: Record<string, string>;
    readonly timeoutMs?: number;
}
/** What is recorded with a completion, besides the outcome. */
export interface CompletionRecord {
    effectRef?: string | null;
    result?: unknown;
    error?: string | null;
}
/** Builds every request the client sends, with the token and the run/step headers. */
export declare class Wire {
    private readonly base;
    constructor(token: string, extra?: Record<string, string>);
    headers(options?: DecisionOptions): Record<string, string>;
    /** A request the gateway decides (a claim or a call): the same body and headers. */
    decided(path: string, capability: string, args: JsonObject | undefined, options?: DecisionOptions): Request;
    complete(intentKey: string, fencingToken: string, outcome: CompletionOutcome, record?: CompletionRecord): Request;
    heartbeat(intentKey: string, fencingToken: string, timeoutMs?: number): Request;
    deriveKey(capability: string, args: JsonObject | undefined, options?: DecisionOptions): Request;
    get(path: string): Request;
    decide(approvalId: string, verdict: "approve" | "deny"): Request;
}
/** One path segment: an intent key or approval id, escaped. */
export declare function segment(value: string): string;
/**
 * The JSON object of an answer that carries one (an envelope, a claim, a record). Throws
 * the typed error for `{"error": ...}` bodies and for answers with no JSON object:
 * `StaleClaim` for OG-0024, `GatewayUnavailable` for 5xx (no decision was made),
 * `GatewayError` otherwise.
 */
export declare function decode(status: number, text: string, intentKey?: string | null): JsonObject;
/** Backoff before each retry of a completion: 250 ms, 500 ms, 1 s, 2 s, ... capped at 4 s. */
export declare function retryDelays(retries: number, firstMs?: number, capMs?: number): number[];
