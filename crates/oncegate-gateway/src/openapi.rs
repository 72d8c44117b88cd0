//! The OpenAPI document of the JSON API, generated from the route handlers, and the
//! route that serves it (`GET /v1/openapi.json`).

use axum::Json;

use crate::error::{ErrorBody, ErrorDetail};
use crate::routes::admin::KillBody;
use crate::routes::answers::{
    Accepted, ApprovalsPage, Cleared, Doubts, FindingsPage, Holds, IntentsPage, KillSwitches,
    Limits, Reconciled, Tools, Verified,
};
use crate::routes::approvals::DecisionBody;
use crate::routes::calls::{CallBody, DeriveBody};
use crate::routes::claims::{ClaimAnswer, CompleteBody, Completed, HeartbeatBody};
use crate::routes::findings::{ClearBody, ReconcileBody};
use crate::routes::tools::AcceptBody;
use crate::routes::{admin, approvals, audit, calls, claims, findings, health, intents, tools};
use crate::upstream::preview::{PreviewHeader, RequestPreview};
use crate::wire::{ApprovalDetail, Envelope, HeldBecause, HeldIntent, MoneyArgument};

/// The OpenAPI document, generated from the handlers in [`crate::routes`].
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "oncegate", description = "One intent, at most one effect: the JSON API for orchestrators without MCP."),
    paths(calls::post_call, claims::post_claim, claims::complete, claims::heartbeat, intents::list_intents, intents::get_intent, approvals::list_approvals, approvals::get_approval, approvals::approve, approvals::deny, calls::derive_key, audit::audit_verify, audit::audit_export, admin::reset_breaker, admin::kill_switch, findings::list_findings, findings::list_holds, findings::clear_hold, findings::list_doubts, findings::clear_doubt, findings::list_limits, findings::reconcile_limit, tools::list_tools, tools::accept_tool, health::healthz, health::readyz, health::metrics_route, health::protected_resource),
    components(schemas(CallBody, Envelope, DeriveBody, DecisionBody, KillBody, ClearBody, ReconcileBody, AcceptBody, ClaimAnswer, CompleteBody, Completed, HeartbeatBody, ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument, RequestPreview, PreviewHeader, ErrorBody, ErrorDetail, IntentsPage, ApprovalsPage, FindingsPage, Holds, Doubts, Limits, KillSwitches, Tools, Accepted, Cleared, Reconciled, Verified)),
    modifiers(&BearerAuth, &ErrorResponses)
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

/// Documents the refusals every authenticated route can answer, each with
/// [`ErrorBody`]: 400 (a malformed header or body), 401 (no or a bad token, with
/// `WWW-Authenticate`), 403 (the wrong role), 429 (authentication throttled), 503 (the
/// store or the identity provider unavailable); 404 where the path names something, 422
/// where a query or a body is read. A status a handler documents keeps its description
/// and gains the schema.
struct ErrorResponses;

/// The headers [`crate::headers::header_string`] reads, with its rule.
const STRUCTURAL_HEADERS: [&str; 3] = ["Oncegate-Run-Id", "Oncegate-Step-Id", "Idempotency-Key"];

impl ErrorResponses {
    const EVERY: [(&'static str, &'static str); 5] = [
        ("400", "a malformed header or body"),
        (
            "401",
            "no token, or one that does not verify (`WWW-Authenticate` says how)",
        ),
        ("403", "the principal's role may not do this"),
        (
            "429",
            "too many failed authentications from this address or for this principal",
        ),
        (
            "503",
            "the store or the identity provider is unavailable: nothing was done",
        ),
    ];
}

impl utoipa::Modify for ErrorResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
        use utoipa::openapi::{Content, Ref, RefOr, Response};
        let content = || Content::new(Some(Ref::from_schema_name("ErrorBody")));
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                item.get.as_mut(),
                item.put.as_mut(),
                item.post.as_mut(),
                item.delete.as_mut(),
            ];
            for op in operations.into_iter().flatten() {
                if op.security.as_ref().is_none_or(Vec::is_empty) {
                    continue;
                }
                let reads_input = op.request_body.is_some()
                    || op
                        .parameters
                        .iter()
                        .flatten()
                        .any(|p| p.parameter_in == ParameterIn::Query);
                let mut wanted: Vec<(&str, &str)> = Self::EVERY.to_vec();
                if path.contains('{') || op.request_body.is_some() {
                    wanted.push((
                        "404",
                        "nothing by that name (a path's, or a body's capability)",
                    ));
                }
                // The structural headers' own rule (headers.rs), so a generated client
                // never sends one the gateway refuses: 1 to 255 visible ASCII characters.
                for p in op.parameters.iter_mut().flatten() {
                    if p.parameter_in == ParameterIn::Header
                        && STRUCTURAL_HEADERS.contains(&p.name.as_str())
                    {
                        p.schema = Some(RefOr::T(Schema::Object(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .min_length(Some(1))
                                .max_length(Some(255))
                                .pattern(Some("^[!-~]+$"))
                                .build(),
                        )));
                    }
                }
                if reads_input {
                    wanted.push(("422", "a query or a body that does not parse"));
                }
                let responses = &mut op.responses.responses;
                for (status, description) in wanted {
                    responses
                        .entry(status.to_owned())
                        .or_insert_with(|| RefOr::T(Response::new(description)));
                }
                for (status, response) in responses.iter_mut() {
                    let RefOr::T(r) = response else { continue };
                    if status.starts_with('2') {
                        continue;
                    }
                    match r.content.get_mut("application/json") {
                        None => {
                            r.content.insert("application/json".to_owned(), content());
                        }
                        // An outcome answered with this status (a denial is a 403
                        // envelope): either body may come.
                        Some(c) => {
                            if let Some(outcome) = c.schema.take() {
                                c.schema = Some(RefOr::T(Schema::OneOf(
                                    OneOfBuilder::new()
                                        .item(outcome)
                                        .item(Ref::from_schema_name("ErrorBody"))
                                        .build(),
                                )));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(<ApiDoc as utoipa::OpenApi>::openapi())
}
