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
import { type FunctionTool, type RunState, type RunToolApprovalItem } from "@openai/agents";
import { type JsonObject } from "./models.js";
/** What a held call's interruption carries: the approval to decide in oncegate. */
export interface HeldCall {
    readonly approvalId: string | null;
    readonly intentKey: string | null;
    readonly capability: string;
    /** The line for a person or a model ("HELD FOR HUMAN APPROVAL ap_… - do not call again."). */
    readonly message: string;
    readonly reason: {
        code: string;
        message: string;
    } | null;
}
/** Options of `oncegateTool`: the tool as the model sees it. */
export interface OncegateToolOptions<S> {
    name: string;
    description: string;
    /** The input's schema (a zod object, or a JSON schema): the capability arguments. */
    parameters: S;
}
/**
 * An Agents SDK function tool that runs `fn` (a `gate.protect(...)` function taking the
 * tool's input object) at most once per intent, with oncegate's holds as the SDK's
 * interruptions. An outcome that is not a success is the tool's output: the error's
 * line, written for the model.
 */
export declare function oncegateTool<I extends JsonObject, R>(fn: (input: I) => Promise<R>, options: OncegateToolOptions<unknown>): FunctionTool<unknown, never, R | string>;
/** The oncegate approval behind an interruption, or null for another tool's. */
export declare function pendingApproval(item: RunToolApprovalItem): HeldCall | null;
/**
 * Lets oncegate's decision stand for every interruption it raised: approves them in the
 * SDK's state, so that on resume each tool claims again and the gateway answers (execute
 * once, the deny's line, or still pending). Answers how many it approved.
 */
export declare function deferToOncegate(state: RunState<any, any>, interruptions: readonly RunToolApprovalItem[]): number;
