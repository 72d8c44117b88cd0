/**
 * `oncegate/langgraph`: a call oncegate holds for a human pauses a LangGraph.js
 * (`@langchain/langgraph` 1.7) graph with its own `interrupt()`.
 *
 * ```ts
 * import { interruptOnHold } from "oncegate/langgraph";
 *
 * const charge = interruptOnHold(gate.protect("charge_card", chargeFn));
 * // in a node (or a tool a ToolNode runs):
 * const receipt = await charge({ order_id, amount });
 *
 * let state = await graph.invoke(input, config);           // held: state.__interrupt__
 * const { approvalId } = state.__interrupt__[0].value;      // decide it in oncegate
 * state = await graph.invoke(new Command({ resume: approvalId }), config);
 * ```
 *
 * On resume LangGraph re-runs the node from its start; the protected function claims
 * again and oncegate, not the resume value, decides: approved, it executes once (and a
 * second resume of the same checkpoint replays the stored result); denied, it throws
 * `Denied` (`String(err)` is the line for the model); still pending, the graph pauses
 * again with a new interrupt. The graph needs a checkpointer, as every `interrupt()` does.
 *
 * Imports `@langchain/langgraph` (an optional peer dependency) only where this module
 * is imported, never through `oncegate`.
 */

import { interrupt } from "@langchain/langgraph";

import { PendingApproval } from "./errors.js";
import { PROTECTED } from "./protect.js";

/** What the interrupt carries: the approval to decide in oncegate, and why the call is held. */
export interface HeldInterrupt {
  readonly type: "oncegate.pending_approval";
  readonly approvalId: string | null;
  readonly intentKey: string | null;
  readonly capability: string | null;
  /** The line for a person or a model ("HELD FOR HUMAN APPROVAL ap_… - do not call again."). */
  readonly message: string;
  readonly reason: { code: string; message: string } | null;
}

/**
 * Wraps a protected function so that a hold calls LangGraph's `interrupt()` with the
 * approval (`HeldInterrupt`) instead of throwing `PendingApproval`. Each hold calls it
 * once more: a resume before the approver decided pauses the graph again, and a resume
 * after it runs the claim that executes.
 */
export function interruptOnHold<P extends unknown[], R>(fn: (...args: P) => Promise<R>): (...args: P) => Promise<R> {
  const capability = (fn as { [PROTECTED]?: { capability: string } })[PROTECTED]?.capability ?? null;
  const wrapped = async (...args: P): Promise<R> => {
    // Terminates: each turn either returns, throws, or consumes one resume value of the
    // task (interrupt() throws when none is left), and a run has finitely many.
    for (;;) {
      try {
        return await fn(...args);
      } catch (err) {
        if (!(err instanceof PendingApproval)) throw err;
        interrupt(heldInterrupt(err, capability));
      }
    }
  };
  Object.defineProperty(wrapped, "name", { value: fn.name });
  return wrapped;
}

/** The interrupt's value for a hold. */
export function heldInterrupt(err: PendingApproval, capability: string | null): HeldInterrupt {
  const reason = err.outcome.reason;
  return {
    type: "oncegate.pending_approval",
    approvalId: err.approvalId,
    intentKey: err.intentKey,
    capability,
    message: err.message,
    reason: reason === null ? null : { code: reason.code, message: reason.message },
  };
}
