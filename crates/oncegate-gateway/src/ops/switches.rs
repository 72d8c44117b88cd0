//! Kill switches, as every surface sets them: `PUT /v1/admin/kill-switches/{target}` and
//! the console's form both end in [`set_kill_switch`].

use crate::error::ApiError;
use crate::state::{AppState, Principal};

/// Switches `target` (`NAME`, `capability:NAME` or `agent:NAME`) off or on again as
/// admin `p` (404 when it names nothing this gateway knows): the JSON API's route and
/// the console's form both end here.
pub(crate) async fn set_kill_switch(
    state: &AppState,
    p: &Principal,
    target: String,
    killed: bool,
    reason: Option<String>,
) -> Result<(), ApiError> {
    let target = if target.contains(':') {
        target
    } else {
        format!("capability:{target}")
    };
    let registry = state.gate().registry();
    let known = match target.split_once(':') {
        Some(("capability", name)) => state.gate().find_capability(name).is_some(),
        Some(("agent", name)) => {
            registry.principal(name).is_some() || state.identity().is_some_and(|i| i.may_name(name))
        }
        _ => false,
    };
    if !known {
        return Err(ApiError::NotFound(format!(
            "`{target}` names no capability or principal (use NAME, capability:NAME or agent:NAME)"
        )));
    }
    // Switched on again, the reason is why (kept in the audit record).
    let (reason, note) = if killed {
        (
            Some(reason.unwrap_or_else(|| format!("by {}", p.name))),
            None,
        )
    } else {
        (None, reason)
    };
    tracing::warn!(target = %target, killed, by = %p.name, "kill switch");
    state.gate().switch(&p.name, &target, reason, note).await?;
    Ok(())
}
