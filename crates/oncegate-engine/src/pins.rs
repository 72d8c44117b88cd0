//! Pinned tool definitions of fronted MCP servers. A fronted server's tool reaches
//! agents with the server's own description and schemas, which are instructions to a
//! model: a server that changes them (a prompt injection in a description, a schema
//! that asks for more) would be obeyed at once. So the definition each undeclared tool
//! had when oncegate first offered it is pinned in the store (shared by every replica);
//! a different one later holds the tool (not offered, calls refused with `OG-0059`) and
//! raises a `tool_changed` finding with its audit event, until an admin accepts the
//! new definition by its digest. Registry capabilities keep the registry's own
//! descriptions and are not pinned.

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::codes::Code;
use oncegate_core::config::Role;
use oncegate_core::key::{canonical_json, digest};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use oncegate_store::{
    Commit, FindingRow, IntentsWrite, OfferedTool, PinsRead, PinsWrite, StoreError, ToolPin,
};

use crate::error::GateError;
use crate::gate::Gate;
use crate::who::Who;

/// The finding's rule, and its kind.
pub const TOOL_CHANGED: &str = "tool_changed";

/// The digest a definition is pinned and accepted by: `sha256:` and the hex SHA-256
/// of its RFC 8785 canonical JSON.
pub fn definition_digest(definition: &Value) -> String {
    format!("sha256:{}", digest(definition))
}

/// One tool a fronted server offers now.
#[derive(Clone, Debug)]
pub struct ToolDefinition {
    /// The server's name for it.
    pub tool: String,
    /// The name agents call it by (for the finding and the audit record).
    pub name: String,
    /// Its definition (description, input schema, annotations, output schema).
    pub definition: Value,
}

/// What the pin says about a tool offered now.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PinCheck {
    /// The definition is the pinned one (pinned now, or earlier): it may be offered.
    Pinned {
        /// Its digest.
        digest: String,
    },
    /// The server offers another definition than the pinned one: held.
    Changed {
        /// The pinned definition's digest.
        pinned: String,
        /// The digest of what the server offers now (the one to accept).
        offered: String,
    },
}

/// What an admin's acceptance did.
#[derive(Clone, Debug)]
pub enum Accepted {
    /// The pending definition is the pin now.
    Now(ToolPin),
    /// That definition was the pin already, and nothing else is pending.
    Already(ToolPin),
    /// Not what is pending (another definition is, or none and the pin is another):
    /// nothing changed. The pin as it stands.
    Stale(ToolPin),
    /// No pin for that server and tool.
    NoPin,
}

impl Gate {
    /// Checks what `server` offers now against its pins, pinning each tool seen for the
    /// first time. A changed definition is recorded as pending and, the first time any
    /// replica sees it, raised as a `tool_changed` finding (with its audit event).
    pub async fn check_pins(
        &self,
        server: &str,
        tools: &[ToolDefinition],
    ) -> Result<Vec<PinCheck>, StoreError> {
        // One read for the whole list: a definition seen before writes nothing (the
        // list is read again every few seconds while a tool is held).
        let known: Vec<ToolPin> = self
            .store
            .tool_pins()
            .await?
            .into_iter()
            .filter(|p| p.server == server)
            .collect();
        let mut checks = Vec::with_capacity(tools.len());
        for t in tools {
            let offered = definition_digest(&t.definition);
            let seen = known.iter().find(|p| p.tool == t.tool);
            match seen {
                Some(p) if p.digest == offered && p.pending.is_none() => {
                    checks.push(PinCheck::Pinned { digest: offered });
                    continue;
                }
                Some(p) if p.pending.as_ref().is_some_and(|q| q.digest == offered) => {
                    checks.push(PinCheck::Changed {
                        pinned: p.digest.clone(),
                        offered,
                    });
                    continue;
                }
                _ => {}
            }
            let at = self.clock.now();
            let pin = self
                .store
                .pin_tool(OfferedTool {
                    server: server.to_owned(),
                    tool: t.tool.clone(),
                    digest: offered.clone(),
                    definition: canonical_json(&t.definition),
                    at,
                })
                .await?;
            if pin.digest == offered {
                checks.push(PinCheck::Pinned { digest: offered });
                continue;
            }
            // The first sighting (this read wrote the pending definition) raises it.
            let first = pin.pending.as_ref().is_some_and(|p| {
                p.digest == offered && p.seen_at.as_millisecond() == at.as_millisecond()
            });
            if first {
                self.raise_tool_changed(&pin, t, &offered, at).await;
            }
            checks.push(PinCheck::Changed {
                pinned: pin.digest,
                offered,
            });
        }
        Ok(checks)
    }

    /// Every pin, and what is pending.
    pub async fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        self.store.tool_pins().await
    }

    /// An admin accepts `server`'s changed definition of `tool`, named by its digest
    /// (the one pending, so an acceptance can never take a definition the admin did
    /// not see). Audited. The replicas offer it at their next read of the server's list.
    pub async fn accept_tool<'a>(
        &self,
        actor: impl Into<Who<'a>>,
        server: &str,
        tool: &str,
        digest: &str,
    ) -> Result<Accepted, GateError> {
        let who = actor.into();
        if self.role_of(who)? != Role::Admin {
            return Err(GateError::Forbidden(
                "only admins accept changed tool definitions".into(),
            ));
        }
        let find = async || -> Result<Option<ToolPin>, StoreError> {
            Ok(self
                .store
                .tool_pins()
                .await?
                .into_iter()
                .find(|p| p.server == server && p.tool == tool))
        };
        let Some(before) = find().await? else {
            return Ok(Accepted::NoPin);
        };
        let now = self.clock.now();
        if !self
            .store
            .accept_tool(server, tool, digest, who.name(), now)
            .await?
        {
            let Some(pin) = find().await? else {
                return Ok(Accepted::NoPin);
            };
            return Ok(if pin.digest == digest && pin.pending.is_none() {
                Accepted::Already(pin)
            } else {
                Accepted::Stale(pin)
            });
        }
        let event = AuditEvent {
            at: now,
            kind: AuditKind::Admin,
            key: None,
            generation: 0,
            capability: None,
            actor: who.name().to_owned(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: None,
            detail: json!({"tool_accepted": {
                "server": server,
                "tool": tool,
                "digest": digest,
                "was": before.digest,
            }}),
        };
        self.store.commit(Commit::event(event)).await?;
        tracing::warn!(
            server,
            tool,
            digest,
            by = who.name(),
            "changed tool definition accepted by an admin"
        );
        let pin = find()
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("the pin of {server}/{tool} is gone")))?;
        Ok(Accepted::Now(pin))
    }

    /// The finding (and its audit event) of a changed definition; a failure is logged,
    /// the tool is held either way.
    async fn raise_tool_changed(
        &self,
        pin: &ToolPin,
        t: &ToolDefinition,
        offered: &str,
        at: Timestamp,
    ) {
        let summary = format!(
            "MCP server `{}` changed the definition of its tool `{}` (offered as `{}`): held until an admin accepts {offered} (`oncegate tools accept {} {} {offered}`)",
            pin.server, t.tool, t.name, pin.server, t.tool
        );
        tracing::error!(alert = TOOL_CHANGED, server = %pin.server, tool = %t.tool, pinned = %pin.digest, offered, "{summary}");
        metrics::counter!("oncegate_tool_changes_total", "server" => pin.server.clone())
            .increment(1);
        let id = format!(
            "f_{}",
            &hex::encode(Sha256::digest(
                format!(
                    "{TOOL_CHANGED}\n{}\n{}\n{}\n{offered}",
                    pin.server, t.tool, pin.digest
                )
                .as_bytes()
            ))[..16]
        );
        let pinned: Value = serde_json::from_str(&pin.definition).unwrap_or(Value::Null);
        let evidence = json!({
            "server": pin.server,
            "tool": t.tool,
            "pinned": {"digest": pin.digest, "definition": pinned, "pinned_at": pin.pinned_at},
            "offered": {"digest": offered, "definition": t.definition},
        });
        let finding = json!({
            "id": id,
            "rule": TOOL_CHANGED,
            "kind": TOOL_CHANGED,
            "capability": t.name,
            "on": {"server": pin.server, "tool": t.tool},
            "effects": [],
            "evidence": evidence,
            "escalation": "held",
            "summary": summary,
            "raised_at": at,
        });
        let mut commit = Commit::event(AuditEvent {
            at,
            kind: AuditKind::Admin,
            key: None,
            generation: 0,
            capability: Some(t.name.clone()),
            actor: "oncegate".into(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: Some(Code::ToolChanged),
            detail: json!({"tool_changed": {
                "server": pin.server,
                "tool": t.tool,
                "pinned": pin.digest,
                "offered": offered,
            }, "finding": id}),
        });
        commit.finding = Some(FindingRow {
            id,
            rule: TOOL_CHANGED.to_owned(),
            raised_at: at,
            body: finding.to_string(),
            delivered_at: None,
            attempts: 0,
            next_attempt_at: Some(at),
            problem: None,
        });
        match self.store.commit(commit).await {
            // Conflict: the same finding is stored already (another replica).
            Ok(()) | Err(StoreError::Conflict) => {}
            Err(e) => {
                tracing::error!(server = %pin.server, tool = %t.tool, error = %e, "the tool_changed finding could not be recorded");
            }
        }
    }
}
