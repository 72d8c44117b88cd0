//! The OpenAPI document is generated from the handlers and covers every route.

use utoipa::OpenApi;

#[test]
fn every_route_is_documented_with_bearer_auth() {
    let doc = oncegate_gateway::server::ApiDoc::openapi();
    let json = serde_json::to_value(&doc).unwrap();
    for path in [
        "/v1/calls",
        "/v1/intents",
        "/v1/intents/{key}",
        "/v1/intents/claim",
        "/v1/intents/{key}/complete",
        "/v1/intents/{key}/heartbeat",
        "/v1/approvals",
        "/v1/approvals/{id}/approve",
        "/v1/approvals/{id}/deny",
        "/v1/keys/derive",
        "/v1/audit/verify",
        "/v1/audit",
        "/v1/admin/breakers/{key}/reset",
        "/v1/admin/kill-switches/{target}",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            json["paths"].get(path).is_some(),
            "{path} is missing from the OpenAPI document"
        );
    }
    assert_eq!(
        json["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let calls = &json["paths"]["/v1/calls"]["post"];
    assert!(calls["responses"].get("202").is_some() && calls["responses"].get("503").is_some());
    assert!(json["components"]["schemas"].get("Envelope").is_some());
}
