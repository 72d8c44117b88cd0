//! The audit chain, as every surface verifies it: `GET /v1/audit/verify` and the
//! console's Verify button both run [`verify_whole`].

use crate::state::AppState;

/// The whole chain verified end to end, every shard and row (this route and the
/// console's Verify button).
pub(crate) async fn verify_whole(
    state: &AppState,
) -> Result<oncegate_store::audit_check::AuditReport, oncegate_store::StoreError> {
    let store = state.gate().store();
    oncegate_store::audit_check::verify_audit(
        store,
        store.chain_key(),
        store.store_id(),
        &[],
        oncegate_store::audit_check::Walk::Full,
    )
    .await
}
