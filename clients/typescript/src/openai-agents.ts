/**
 * `oncegate/openai-agents`: a protected function as an OpenAI Agents SDK
 * (`@openai/agents` 0.20) tool, whose held calls become the SDK's tool-approval
 * interruptions.
 *
 * ```ts
 * import { Agent, run } from "@openai/agents";
 * import { oncegateTool, pendingApproval, deferToOncegate } from "oncegate/openai-agents";
 *
 * const agent = new Agent({ name: "biller", tools: [oncegateTool(chargeCard, { name: "charge_card", description, parameters })] });
 * let result = await run(agent, "Charge order A-7 2500.00");
 * for (const item of result.interruptions) console.log(pendingApproval(item)?.approvalId);
 * // an approver decides in oncegate (console, `oncegate approvals approve`, the API), then:
 * deferToOncegate(result.state, result.interruptions);
 * result = await run(agent, result.state);
 * ```
 *
 * `needsApproval` claims before the SDK runs the tool: a call oncegate holds interrupts
 * the run (`result.interruptions`); a claim that grants the execution is kept, by call
 * id, for the invocation that follows, so each call claims once. Resumed, the tool
 * claims again and oncegate's decision rules: approved, the function executes once;
 * denied, the tool's output is the deny's line ("DENIED: ..."), which the model reads;
 * still pending, the output says so. `state.reject(item, { message })` still works for
 * a run that gives up locally (the tool is not called; the oncegate approval expires).
 *
 * Imports `@openai/agents` (an optional peer dependency) only where this module is
 * imported, never through `oncegate`.
 */

import { tool, type FunctionTool, type RunState, type RunToolApprovalItem } from "@openai/agents";

import { OutcomeError, PendingApproval, errorForOutcome } from "./errors.js";
import { Execute, Outcome, type JsonObject } from "./models.js";
import { protectedInternals } from "./protect.js";

/** What a held call's interruption carries: the approval to decide in oncegate. */
export interface HeldCall {
  readonly approvalId: string | null;
  readonly intentKey: string | null;
  readonly capability: string;
  /** The line for a person or a model ("HELD FOR HUMAN APPROVAL ap_… - do not call again."). */
  readonly message: string;
  readonly reason: { code: string; message: string } | null;
}

/** Options of `oncegateTool`: the tool as the model sees it. */
export interface OncegateToolOptions<S> {
  name: string;
  description: string;
  /** The input's schema (a zod object, or a JSON schema): the capability arguments. */
  parameters: S;
}

const held = new Map<string, HeldCall>();

/**
 * An Agents SDK function tool that runs `fn` (a `gate.protect(...)` function taking the
 * tool's input object) at most once per intent, with oncegate's holds as the SDK's
 * interruptions. An outcome that is not a success is the tool's output: the error's
 * line, written for the model.
 */
export function oncegateTool<I extends JsonObject, R>(
  fn: (input: I) => Promise<R>,
  options: OncegateToolOptions<unknown>,
): FunctionTool<unknown, never, R | string> {
  const internals = protectedInternals(fn);
  const kept = new Map<string, Execute>();
  const made = tool({
    name: options.name,
    description: options.description,
    parameters: options.parameters as never,
    needsApproval: async (_context: unknown, input: unknown, callId?: string) => {
      const answer = await internals.gate.claim(internals.capability, internals.capabilityArguments(input as I));
      if (answer instanceof Execute) {
        if (callId !== undefined) kept.set(callId, answer);
        return false;
      }
      const err = answer instanceof Outcome ? errorForOutcome(answer) : null;
      if (!(err instanceof PendingApproval)) return false;
      if (callId !== undefined) held.set(callId, heldCall(err, internals.capability));
      return true;
    },
    execute: async (input: unknown, _context?: unknown, details?: { toolCall?: { callId?: string } }) => {
      const callId = details?.toolCall?.callId;
      const first = callId === undefined ? undefined : kept.get(callId);
      if (callId !== undefined) kept.delete(callId);
      try {
        const value = await internals.run([input as I], first);
        if (callId !== undefined) held.delete(callId);
        return value;
      } catch (err) {
        if (err instanceof OutcomeError) return err.message;
        throw err;
      }
    },
  });
  return made as unknown as FunctionTool<unknown, never, R | string>;
}

/** The oncegate approval behind an interruption, or null for another tool's. */
export function pendingApproval(item: RunToolApprovalItem): HeldCall | null {
  const callId = (item.rawItem as { callId?: unknown }).callId;
  return typeof callId === "string" ? (held.get(callId) ?? null) : null;
}

/**
 * Lets oncegate's decision stand for every interruption it raised: approves them in the
 * SDK's state, so that on resume each tool claims again and the gateway answers (execute
 * once, the deny's line, or still pending). Answers how many it approved.
 */
export function deferToOncegate(state: RunState<any, any>, interruptions: readonly RunToolApprovalItem[]): number {
  let count = 0;
  for (const item of interruptions) {
    if (pendingApproval(item) === null) continue;
    state.approve(item);
    count++;
  }
  return count;
}

function heldCall(err: PendingApproval, capability: string): HeldCall {
  const reason = err.outcome.reason;
  return {
    approvalId: err.approvalId,
    intentKey: err.intentKey,
    capability,
    message: err.message,
    reason: reason === null ? null : { code: reason.code, message: reason.message },
  };
}
