/**
 * oncegate: one intent, at most one effect.
 *
 * The client for an oncegate gateway's two-phase API, for code that performs side
 * effects itself (a payment SDK call, an email send) and must not perform them twice.
 * The gateway derives the key from the normalised intent, so a re-planned call with
 * drifted arguments replays the first result instead of charging again. See README.md.
 */
export { Client, DEFAULT_TIMEOUT_MS } from "./client.js";
export { current, run, step } from "./context.js";
export { CompletionNotRecorded, Denied, DryRun, errorForOutcome, Failed, GatewayError, GatewayUnavailable, InFlight, OncegateError, OutcomeError, OutcomeUnknown, PendingApproval, ProtocolError, Refused, Replayed, StaleClaim, } from "./errors.js";
export { Execute, Outcome, PassThrough, } from "./models.js";
export * as notSent from "./notSent.js";
export { PROTECTED, protectedInternals } from "./protect.js";
