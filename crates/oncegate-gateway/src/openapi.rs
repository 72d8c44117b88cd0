//! The OpenAPI document of the JSON API, generated from the route handlers, and the
//! route that serves it (`GET /v1/openapi.json`).

use axum::Json;

use crate::routes::admin::KillBody;
use crate::routes::approvals::DecisionBody;
use crate::routes::approvals::detail::{ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument};
use crate::routes::calls::{CallBody, DeriveBody};
use crate::routes::claims::{ClaimAnswer, CompleteBody, Completed, HeartbeatBody};
use crate::routes::detection::{ClearBody, ReconcileBody};
use crate::routes::tools::AcceptBody;
use crate::routes::{admin, approvals, audit, calls, claims, detection, intents, ops, tools};
use crate::upstream::preview::{PreviewHeader, RequestPreview};
use crate::wire::Envelope;

/// The OpenAPI document, generated from the handlers in [`crate::routes`].
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "oncegate", description = "One intent, at most one effect: the JSON API for orchestrators without MCP."),
    paths(calls::post_call, claims::post_claim, claims::complete, claims::heartbeat, intents::list_intents, intents::get_intent, approvals::list_approvals, approvals::detail::get_approval, approvals::approve, approvals::deny, calls::derive_key, audit::audit_verify, audit::audit_export, admin::reset_breaker, admin::kill_switch, detection::list_findings, detection::list_holds, detection::clear_hold, detection::list_doubts, detection::clear_doubt, detection::list_limits, detection::reconcile_limit, tools::list_tools, tools::accept_tool, ops::healthz, ops::readyz, ops::metrics_route, ops::protected_resource),
    components(schemas(CallBody, Envelope, DeriveBody, DecisionBody, KillBody, ClearBody, ReconcileBody, AcceptBody, ClaimAnswer, CompleteBody, Completed, HeartbeatBody, ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument, RequestPreview, PreviewHeader)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(<ApiDoc as utoipa::OpenApi>::openapi())
}
