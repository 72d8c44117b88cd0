/**
 * The client: the two-phase API (claim, complete, heartbeat), the gateway-executed call,
 * key derivation, approvals, and `protect()` (in protect.ts), over `fetch` alone.
 */

import { CompletionNotRecorded, GatewayUnavailable } from "./errors.js";
import {
  Execute,
  Outcome,
  parseClaim,
  parseExecute,
  parseKeyExplanation,
  parseOutcome,
  type ClaimAnswer,
  type CompletionOutcome,
  type JsonObject,
  type KeyExplanation,
} from "./models.js";
import { protectFunction, type Gate, type Logger, type ProtectContext, type ProtectedFunction, type ProtectOptions } from "./protect.js";
import { decode, retryDelays, segment, Wire, type CompletionRecord, type DecisionOptions, type Request } from "./wire.js";

/** Milliseconds per request: a claim may wait for the gateway to reconcile an earlier attempt. */
export const DEFAULT_TIMEOUT_MS = 30_000;

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

interface Answer {
  readonly status: number;
  readonly text: string;
  readonly date: string | null;
}

/**
 * A connection to one oncegate gateway, as one principal (the token's).
 *
 * ```ts
 * const gate = new Client("http://127.0.0.1:7878", { token: process.env.ONCEGATE_TOKEN! });
 * ```
 */
export class Client implements Gate {
  readonly url: string;
  readonly timeoutMs: number;
  readonly completeRetries: number;
  readonly logger: Logger;
  private readonly wire: Wire;
  private readonly fetchImpl: typeof fetch;

  constructor(url: string, options: ClientOptions) {
    if (!/^https?:\/\//.test(url)) throw new TypeError(`the gateway URL must start with http:// or https://, got ${JSON.stringify(url)}`);
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.completeRetries = options.completeRetries ?? 4;
    this.logger = options.logger ?? console;
    this.wire = new Wire(options.token, options.headers);
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("this runtime has no global fetch: pass options.fetch");
    this.fetchImpl = f;
  }

  /**
   * Asks to execute `capability` with `args`: the decision, before any effect. Answers
   * `Execute` (run the effect with its `idempotencyKey`, then `complete`), `PassThrough`
   * (a read: just run it) or the `Outcome` envelope (replayed, in_flight, unknown, ...:
   * do not execute). Throws `GatewayUnavailable` when the gateway cannot be reached
   * (nothing was claimed for you) and `GatewayError` when it refuses the request.
   */
  async claim(capability: string, args?: JsonObject, options: DecisionOptions = {}): Promise<ClaimAnswer> {
    const answer = await this.send(this.wire.decided("/v1/intents/claim", capability, args, options), "claim");
    return parseClaim(decode(answer.status, answer.text), answer.status, answer.date);
  }

  /**
   * Records what happened to a claimed execution; answers what was recorded.
   * `outcome`: `applied` (with `effectRef` and `result`), `failed` (the provider said no),
   * `unknown` (it may have happened) or `not_sent` (proof that nothing left). Retried
   * with backoff when the gateway is unreachable or answers 5xx (a repeat answers what
   * was recorded). Throws `StaleClaim` when the claim was lost (nothing recorded) and
   * `CompletionNotRecorded` when every try failed.
   */
  async complete(claim: Execute | string, outcome: CompletionOutcome, options: CompleteOptions = {}): Promise<Outcome> {
    const [key, token] = keyAndToken(claim, options.fencingToken);
    const req = this.wire.complete(key, token, outcome, options);
    const delays = retryDelays(options.retries ?? this.completeRetries);
    let last: GatewayUnavailable | null = null;
    for (let attempt = 0; attempt <= delays.length; attempt++) {
      if (attempt > 0) await sleep(delays[attempt - 1] as number);
      try {
        const answer = await this.send(req, `record ${outcome}`, key);
        const recorded = parseOutcome(decode(answer.status, answer.text, key), answer.status);
        if (recorded.httpStatus === 503) {
          // An envelope refused for the store (OG-0007): nothing recorded yet.
          throw new GatewayUnavailable(recorded.message, { intentKey: key, statusCode: 503, code: recorded.reasonCode });
        }
        return recorded;
      } catch (err) {
        if (!(err instanceof GatewayUnavailable)) throw err;
        last = err;
        this.logger.warn(`oncegate: recording ${outcome} for ${key} failed (try ${attempt + 1}): ${err.message}`);
      }
    }
    throw new CompletionNotRecorded(
      `could not record ${JSON.stringify(outcome)} for intent ${key} after ${delays.length + 1} tries (${last?.message}); ` +
        "its lease will expire and the gateway will reconcile the intent with the provider",
      { intentKey: key, outcome, cause: last },
    );
  }

  /** Extends the lease of a claim you hold; answers the claim with its new lease. Throws `StaleClaim` when it is no longer yours. */
  async heartbeat(claim: Execute | string, options: { fencingToken?: string; timeoutMs?: number } = {}): Promise<Execute> {
    const [key, token] = keyAndToken(claim, options.fencingToken);
    const answer = await this.send(this.wire.heartbeat(key, token, options.timeoutMs), "heartbeat", key);
    return parseExecute(decode(answer.status, answer.text, key), answer.date);
  }

  /** `POST /v1/calls`: the gateway decides and executes its own upstream. Answers every envelope (`raiseForStatus()` throws for non-successes). */
  async call(capability: string, args?: JsonObject, options: DecisionOptions = {}): Promise<Outcome> {
    const answer = await this.send(this.wire.decided("/v1/calls", capability, args, options), "call");
    return parseOutcome(decode(answer.status, answer.text), answer.status);
  }

  /** The intent key these arguments make, and which inputs entered it. */
  async deriveKey(capability: string, args?: JsonObject, options: Omit<DecisionOptions, "idempotencyKey"> = {}): Promise<KeyExplanation> {
    const answer = await this.send(this.wire.deriveKey(capability, args, options), "derive a key");
    return parseKeyExplanation(decode(answer.status, answer.text));
  }

  /** The stored intent record (approver and admin tokens only). */
  async getIntent(intentKey: string): Promise<JsonObject> {
    const answer = await this.send(this.wire.get(`/v1/intents/${segment(intentKey)}`), "read an intent", intentKey);
    return decode(answer.status, answer.text, intentKey);
  }

  /** What an approver weighs: the held call's arguments, digest, rendered request, why it is held (approver and admin tokens). */
  async getApproval(approvalId: string): Promise<JsonObject> {
    const answer = await this.send(this.wire.get(`/v1/approvals/${segment(approvalId)}`), "read an approval");
    return decode(answer.status, answer.text);
  }

  /** Approves a held call (approver tokens); answers its outcome. */
  async approve(approvalId: string): Promise<Outcome> {
    const answer = await this.send(this.wire.decide(approvalId, "approve"), "approve");
    return parseOutcome(decode(answer.status, answer.text), answer.status);
  }

  /** Denies a held call (approver tokens); answers its outcome. */
  async deny(approvalId: string): Promise<Outcome> {
    const answer = await this.send(this.wire.decide(approvalId, "deny"), "deny");
    return parseOutcome(decode(answer.status, answer.text), answer.status);
  }

  /**
   * Makes `fn`, which performs `capability`'s effect, run at most once per intent; see
   * protect.ts. The returned function takes `fn`'s parameters without its last one (the
   * `ProtectContext` oncegate passes in, with the `idempotencyKey`) and resolves to what
   * `fn` returns, or, on a replay, to the stored result.
   */
  protect<P extends unknown[], R>(
    capability: string,
    fn: (...args: [...P, ProtectContext]) => R,
    options: ProtectOptions<P, Awaited<R>> = {},
  ): ProtectedFunction<P, Awaited<R>> {
    return protectFunction(this, capability, fn, options);
  }

  private async send(req: Request, what: string, intentKey: string | null = null): Promise<Answer> {
    // Encoded before the try: a body that is not JSON is the caller's bug, not the network's.
    const body = req.body === undefined ? undefined : encode(req.body);
    const headers = body === undefined ? req.headers : { ...req.headers, "Content-Type": "application/json" };
    try {
      const response = await this.fetchImpl(this.url + req.path, {
        method: req.method,
        headers,
        ...(body === undefined ? {} : { body }),
        signal: AbortSignal.timeout(req.timeoutMs ?? this.timeoutMs),
      });
      return { status: response.status, text: await response.text(), date: response.headers.get("date") };
    } catch (err) {
      throw new GatewayUnavailable(`could not reach the oncegate gateway to ${what}: ${describe(err)}`, { intentKey, cause: err });
    }
  }
}

function keyAndToken(claim: Execute | string, fencingToken: string | undefined): [string, string] {
  if (claim instanceof Execute) return [claim.intentKey, fencingToken ?? claim.fencingToken];
  if (fencingToken === undefined) throw new TypeError("pass the Execute claim, or its intent key with fencingToken");
  return [claim, fencingToken];
}

/** The request body; NaN and Infinity are not JSON, and the gateway is strict. */
export function encode(body: unknown): string {
  return JSON.stringify(body, (_key, value: unknown) => {
    if (typeof value === "number" && !Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
    return value;
  });
}

/** An error in one line, with the direct cause's code (`TypeError: fetch failed (ECONNREFUSED)`). */
export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause as { code?: unknown } | undefined;
  const code = typeof cause?.code === "string" ? ` (${cause.code})` : "";
  return `${err.name}: ${err.message}${code}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
