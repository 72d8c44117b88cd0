//! Config errors name the file, line and field, and say how to fix it.

use crate::{examples, parse, payments};

fn base() -> String {
    std::fs::read_to_string(examples().join("payments.toml")).unwrap()
}

fn error_for(text: &str) -> oncegate_core::config::ConfigError {
    let errors = parse(text).expect_err("the config must be refused");
    errors.0.into_iter().next().unwrap()
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
        + 1
}

#[test]
fn the_example_loads_with_documented_defaults() {
    let r = payments();
    assert_eq!(r.capabilities().len(), 5);
    let ledger = r.capability("append_ledger").unwrap();
    assert_eq!(
        ledger.replay_window,
        jiff::SignedDuration::from_hours(24),
        "non_idempotent default window"
    );
    assert_eq!(ledger.attempt_ceiling, Some(10));
    let read = r.capability("get_order").unwrap();
    assert_eq!(read.attempt_ceiling, None);
    assert_eq!(r.first_agent().unwrap().name, "planner");
}

#[test]
fn unknown_field_names_file_line_and_field() {
    let text = base().replace(
        "attempt_ceiling = 5\n",
        "attempt_ceiling = 5\nattempt_cieling = 6\n",
    );
    let e = error_for(&text);
    assert!(e.file.ends_with("test.toml"));
    assert_eq!(e.line, line_of(&text, "attempt_cieling"));
    assert!(e.message.contains("attempt_cieling"), "{}", e.message);
    assert!(e.field.starts_with("capabilities[2]"), "{e}");
    assert!(e.help.is_some());
}

#[test]
fn inline_tokens_are_refused_with_a_hint() {
    let text = base().replace(
        "token_env = \"ONCEGATE_TOKEN_PLANNER\"",
        "token = \"s3cret\"",
    );
    let e = error_for(&text);
    assert_eq!(e.line, line_of(&text, "token = \"s3cret\""));
    assert!(e.help.unwrap().contains("token_env"));
}

#[test]
fn non_idempotent_without_a_key_recipe_is_an_error() {
    let text = r#"
[[capabilities]]
name = "send_sms"
category = "non_idempotent"

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:1/sms"
"#;
    let e = error_for(text);
    assert_eq!(e.field, "capabilities[0].key");
    assert!(e.message.contains("no key recipe"), "{}", e.message);
    assert_eq!(e.line, line_of(text, "name = \"send_sms\""));
}

#[test]
fn keyed_without_key_threading_is_an_error() {
    let text = r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = { business_ref = "invoice" }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:1/pay"
idempotency = "none"
"#;
    let e = error_for(text);
    assert_eq!(e.field, "capabilities[0].upstream.idempotency");
    assert_eq!(e.line, line_of(text, "idempotency = \"none\""));
}

#[test]
fn mcp_reconciliation_must_say_where_found_is() {
    let text = r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = { business_ref = "invoice" }

[capabilities.upstream]
kind = "mcp"
url = "http://127.0.0.1:1/mcp"
tool = "pay"

[capabilities.reconcile]
kind = "mcp"
tool = "find_payment"
"#;
    let e = error_for(text);
    assert_eq!(e.field, "capabilities[0].reconcile.found");
    assert!(e.message.contains("found"), "{}", e.message);
}

#[test]
fn tool_errors_and_an_empty_host_list_are_checked() {
    let text = r#"
[gateway]
mcp_allowed_hosts = []

[[capabilities]]
name = "pay"
category = "keyed"
key = { business_ref = "invoice" }

[capabilities.upstream]
kind = "mcp"
url = "http://127.0.0.1:1/mcp"
tool = "pay"
tool_errors = "failed"
"#;
    let e = error_for(text);
    assert_eq!(e.field, "gateway.mcp_allowed_hosts");
    let http = r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = { business_ref = "invoice" }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:1/pay"
tool_errors = "failed"
"#;
    assert_eq!(
        error_for(http).field,
        "capabilities[0].upstream.tool_errors"
    );
}

#[test]
fn semantic_errors_point_at_their_line() {
    let cases = [
        (
            "replay_window = \"10m\"",
            "replay_window = \"ten minutes\"",
            "replay_window",
        ),
        (
            "default_currency = \"USD\" },\n]\n\n# The key travels",
            "default_currency = \"USX\" },\n]\n\n# The key travels",
            "USX",
        ),
        (
            "url = \"{env.SANDBOX_URL}/v1/emails\"",
            "url = \"{env.SANDBOX_URL}/v1/emails/{nope}\"",
            "nope",
        ),
        (
            "time_zone = \"UTC\"",
            "time_zone = \"Mars/Olympus\"",
            "Mars",
        ),
        (
            "currency = \"{norm.amount.currency}\", memo",
            "currency = \"{norm.amont.currency}\", memo",
            "amont",
        ),
    ];
    for (from, to, needle) in cases {
        let text = base().replacen(from, to, 1);
        assert_ne!(text, base(), "case {needle} did not apply");
        let e = error_for(&text);
        assert!(e.to_string().contains(needle), "{e}");
        assert!(e.line > 0, "{e}");
        let line = text.lines().nth(e.line - 1).unwrap();
        let field_leaf = e.field.rsplit('.').next().unwrap();
        assert!(
            line.contains(needle) || line.contains(field_leaf),
            "line {} `{line}` for {e}",
            e.line
        );
    }
}

#[test]
fn non_idempotent_cannot_retry_unknowns() {
    let text = base().replace("on_unknown = \"escalate\"", "on_unknown = \"retry\"");
    let e = error_for(&text);
    assert_eq!(e.line, line_of(&text, "on_unknown = \"retry\""));
}

#[test]
fn errors_display_as_file_line_column_field() {
    let text = base().replace("attempt_ceiling = 5\n", "attempt_ceiling = \"five\"\n");
    let shown = error_for(&text).to_string();
    let line = line_of(&text, "attempt_ceiling = \"five\"");
    assert!(shown.contains(&format!("test.toml:{line}:")), "{shown}");
}

/// A non_idempotent capability keyed on free text alone would send again on every
/// reworded re-plan: a located config error, not a silent pass.
#[test]
fn non_idempotent_keyed_on_free_text_alone_is_an_error() {
    let text = r#"
[[capabilities]]
name = "notify"
category = "non_idempotent"
on_unknown = "escalate"

[capabilities.key]
significant = [{ arg = "message", type = "text" }, { arg = "subject", type = "text", case_fold = true }]
"#;
    let e = error_for(text);
    assert!(e.file.ends_with("test.toml"));
    assert_eq!(e.field, "capabilities[0].key.significant");
    assert_eq!(e.line, line_of(text, "significant = ["));
    assert!(e.message.contains("free text alone"), "{e}");
    assert!(e.help.unwrap().contains("business_ref"));
    // A business reference, or one argument that is not free text, makes it a recipe.
    for fix in [
        text.replace(
            "[capabilities.key]\n",
            "[capabilities.key]\nbusiness_ref = \"message_id\"\n",
        ),
        text.replace(
            "{ arg = \"subject\", type = \"text\", case_fold = true }",
            "{ arg = \"to\", type = \"email\" }",
        ),
    ] {
        parse(&fix).unwrap_or_else(|e| panic!("{e}\n{fix}"));
    }
    // Other categories may key on text (a read, an idempotent write).
    parse(&text.replace("non_idempotent", "idempotent_write")).unwrap();
}

#[test]
fn normaliser_options_apply_only_where_they_mean_something() {
    let with = |options: &str| {
        format!(
            r#"
[[capabilities]]
name = "refund"
category = "keyed"
key = {{ business_ref = "order_id", significant = [{options}] }}
"#
        )
    };
    for ok in [
        r#"{ arg = "amount", type = "money", default_currency = "USD", allow_negative = true }"#,
        r#"{ arg = "account", type = "id", case_fold = true, width_fold = true }"#,
        r#"{ arg = "memo", type = "text", case_fold = true }"#,
    ] {
        parse(&with(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for (bad, field) in [
        (
            r#"{ arg = "memo", type = "text", width_fold = true }"#,
            "width_fold",
        ),
        (
            r#"{ arg = "n", type = "integer", allow_negative = true }"#,
            "allow_negative",
        ),
    ] {
        let e = error_for(&with(bad));
        assert!(e.field.ends_with(field), "{bad}: {e}");
    }
    let registry = parse(&with(
        r#"{ arg = "amount", type = "money", default_currency = "USD", allow_negative = true }"#,
    ))
    .unwrap();
    let cap = registry.capability("refund").unwrap();
    assert!(matches!(
        cap.key.significant[0].normaliser,
        oncegate_core::normalise::Normaliser::Money {
            allow_negative: true,
            ..
        }
    ));
}

#[test]
fn store_settings_default_and_parse() {
    let r = payments();
    assert_eq!(
        r.store,
        oncegate_core::config::StoreSettings {
            pool_size: 10,
            statement_timeout: std::time::Duration::from_secs(5),
            audit_shards: 16,
        }
    );
    let text = base().replace(
        "url = \"sqlite://oncegate.db\"",
        "url = \"postgres://og@db.internal/og\"\npool_size = 25\nstatement_timeout = \"1500ms\"\naudit_shards = 64",
    );
    let r = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.store_url, "postgres://og@db.internal/og");
    assert_eq!(r.store.pool_size, 25);
    assert_eq!(
        r.store.statement_timeout,
        std::time::Duration::from_millis(1500)
    );
    assert_eq!(r.store.audit_shards, 64);
}

#[test]
fn bad_store_settings_name_file_line_and_field() {
    for (setting, field, says) in [
        ("pool_size = 0", "store.pool_size", "between 1 and 1000"),
        (
            "audit_shards = 100000",
            "store.audit_shards",
            "between 1 and 4096",
        ),
        (
            "statement_timeout = \"soon\"",
            "store.statement_timeout",
            "not a duration",
        ),
        (
            "statement_timeout = \"0s\"",
            "store.statement_timeout",
            "zero",
        ),
    ] {
        let text = base().replace(
            "url = \"sqlite://oncegate.db\"",
            &format!("url = \"sqlite://oncegate.db\"\n{setting}"),
        );
        let e = error_for(&text);
        assert!(e.file.ends_with("test.toml"), "{e}");
        assert_eq!(e.line, line_of(&text, setting), "{setting}: {e}");
        assert_eq!(e.field, field, "{setting}: {e}");
        assert!(e.message.contains(says), "{setting}: {e}");
        assert!(e.help.is_some(), "{setting}: {e}");
    }
}

const IDENTITY: &str = r#"
[identity]
resource = "https://gw.example.com/mcp"

[[identity.issuers]]
issuer = "https://idp.example.com"
jwks_url = "https://idp.example.com/jwks"
principal_prefix = "idp:"
role_claim = "roles"
roles = { agent = ["oncegate.agent"], approver = ["oncegate.approver"] }
"#;

#[test]
fn identity_issuers_load_with_documented_defaults() {
    let r = parse(&format!("{}{IDENTITY}", base())).unwrap_or_else(|e| panic!("{e}"));
    let id = r.identity.as_ref().expect("identity is configured");
    assert_eq!(id.resource, "https://gw.example.com/mcp");
    assert_eq!(id.authorization_servers, vec!["https://idp.example.com"]);
    assert_eq!(
        id.metadata_url(),
        "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
    );
    let issuer = &id.issuers[0];
    assert_eq!(issuer.audience, vec!["https://gw.example.com/mcp"]);
    assert_eq!(issuer.algorithms, vec!["RS256", "ES256"]);
    assert_eq!(issuer.principal_claim, "sub");
    assert_eq!(issuer.clock_skew, std::time::Duration::from_secs(60));
    assert_eq!(issuer.jwks_max_age, std::time::Duration::from_secs(600));
    assert_eq!(
        issuer.roles.role_of(["oncegate.approver"]),
        Some(oncegate_core::config::Role::Approver)
    );
    assert!(
        payments().identity.is_none(),
        "no [identity], static tokens only"
    );
}

#[test]
fn identity_mistakes_that_would_accept_a_forged_token_are_located_errors() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "roles = {",
            "algorithms = [\"RS256\", \"HS256\"]\nroles = {",
            "shared-secret",
        ),
        (
            "roles = {",
            "algorithms = [\"none\"]\nroles = {",
            "unsigned",
        ),
        (
            "jwks_url = \"https://idp.example.com/jwks\"",
            "jwks_url = \"http://idp.example.com/jwks\"",
            "plain http",
        ),
        (
            "jwks_url = \"https://idp.example.com/jwks\"",
            "jwks_url = \"https://idp.example.com/jwks\"\njwks_file = \"jwks.json\"",
            "both",
        ),
        (
            "jwks_url = \"https://idp.example.com/jwks\"\n",
            "",
            "names no keys",
        ),
        (
            "resource = \"https://gw.example.com/mcp\"\n",
            "",
            "needs `resource`",
        ),
        ("role_claim = \"roles\"\n", "", "no token could get a role"),
        (
            "roles = {",
            "clock_skew = \"1h\"\nroles = {",
            "long expired",
        ),
        (
            "approver = [\"oncegate.approver\"]",
            "approver = [\"oncegate.agent\"]",
            "names two roles",
        ),
    ];
    for (from, to, needle) in cases {
        let text = format!("{}{}", base(), IDENTITY.replacen(from, to, 1));
        let errors = parse(&text).expect_err(needle);
        let e = errors
            .0
            .iter()
            .find(|e| e.message.contains(needle))
            .unwrap_or_else(|| panic!("no error says {needle:?}: {errors}"));
        assert!(e.line > 0, "{e}");
        assert!(e.field.starts_with("identity"), "{e}");
    }
    // Two entries for one issuer: the second is the one named.
    let second = IDENTITY.split_once("[[identity.issuers]]").unwrap().1;
    let twice = format!("{}{IDENTITY}\n[[identity.issuers]]{second}", base());
    let errors = parse(&twice).expect_err("a duplicate issuer");
    let e = errors
        .0
        .iter()
        .find(|e| e.message.contains("declared twice"))
        .unwrap_or_else(|| panic!("{errors}"));
    let last = twice.rfind("issuer = \"https://idp").unwrap();
    assert_eq!(e.line, twice[..last].lines().count() + 1, "{e}");
    // Two issuers whose principals' names could meet (issue 33): one prefix for both,
    // one prefix beginning the other, or one without a prefix. The second is named.
    for (prefix, needle) in [
        ("principal_prefix = \"idp:\"", "`idp:` and `idp:`"),
        ("principal_prefix = \"idp:x\"", "`idp:` and `idp:x`"),
        ("", "`idp:` and ``"),
    ] {
        let partner = second
            .replace("https://idp.example.com", "https://partner.example.com")
            .replace("principal_prefix = \"idp:\"", prefix);
        let text = format!("{}{IDENTITY}\n[[identity.issuers]]{partner}", base());
        let errors = parse(&text).expect_err(needle);
        let e = errors
            .0
            .iter()
            .find(|e| e.message.contains("overlapping prefixes"))
            .unwrap_or_else(|| panic!("{errors}"));
        assert!(e.message.contains(needle), "{e}");
        assert!(e.message.contains("https://partner.example.com"), "{e}");
        assert!(e.line > 0, "{e}");
    }
    let partner = second
        .replace("https://idp.example.com", "https://partner.example.com")
        .replace(
            "principal_prefix = \"idp:\"",
            "principal_prefix = \"partner:\"",
        );
    parse(&format!(
        "{}{IDENTITY}\n[[identity.issuers]]{partner}",
        base()
    ))
    .unwrap_or_else(|e| panic!("distinct prefixes load: {e}"));
    // A JWKS file that is not a key set, or is missing, names the file.
    for (file, needle) in [
        ("policies.cedar", "is not a JWKS"),
        ("missing.json", "cannot read"),
    ] {
        let text = format!(
            "{}{}",
            base(),
            IDENTITY.replace(
                "jwks_url = \"https://idp.example.com/jwks\"",
                &format!("jwks_file = \"{file}\""),
            )
        );
        let errors = parse(&text).expect_err(needle);
        assert!(
            errors
                .0
                .iter()
                .any(|e| e.message.contains(needle) && e.message.contains(file)),
            "{errors}"
        );
    }
}

/// The example with `servers` ([[mcp_servers]] tables) and `capability` appended.
fn with_servers(servers: &str, capability: &str) -> String {
    format!("{}\n{servers}\n{capability}", base())
}

const FRONTED_CHARGE: &str = r#"
[[capabilities]]
name = "fronted_charge"
category = "keyed"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "mcp"
server = "pay"
tool = "create_charge"
headers = { X-Tenant = "acme" }
"#;

#[test]
fn a_capability_of_a_fronted_server_takes_its_url_headers_and_timeout() {
    let text = with_servers(
        r#"
[[mcp_servers]]
alias = "pay"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer {env.PAY_KEY}", x-tenant = "server" }
timeout = "3s"
undeclared = "require_approval"
"#,
        FRONTED_CHARGE,
    );
    let r = parse(&text).unwrap();
    let server = &r.mcp_servers[0];
    assert_eq!(server.alias, "pay");
    assert_eq!(
        server.undeclared,
        oncegate_core::config::Undeclared::RequireApproval
    );
    assert_eq!(
        server.refresh,
        jiff::SignedDuration::from_mins(5),
        "the default"
    );
    let up = r
        .capability("fronted_charge")
        .unwrap()
        .upstream
        .clone()
        .unwrap();
    assert_eq!(up.server.as_deref(), Some("pay"));
    assert_eq!(up.url.to_string(), "http://127.0.0.1:9/mcp");
    assert_eq!(up.timeout, jiff::SignedDuration::from_secs(3));
    assert!(up.headers.contains_key("Authorization"));
    // The capability's own header wins over the server's, whatever the case of its name.
    assert_eq!(up.headers["X-Tenant"].to_string(), "acme");
    assert!(
        !up.headers.contains_key("x-tenant"),
        "{:?}",
        up.headers.keys()
    );
}

#[test]
fn fronted_server_mistakes_point_at_their_line() {
    let server = |alias: &str, extra: &str| {
        format!("[[mcp_servers]]\nalias = \"{alias}\"\nurl = \"http://127.0.0.1:9/mcp\"\n{extra}")
    };
    // An alias that cannot prefix tool names.
    let text = with_servers(&server("pay_ments", ""), "");
    let e = error_for(&text);
    assert_eq!(e.line, line_of(&text, "pay_ments"), "{e}");
    assert!(e.field.ends_with("alias"), "{e}");
    assert!(
        e.help.as_deref().unwrap_or("").contains("<alias>_<tool>"),
        "{e}"
    );
    // Declared twice.
    let text = with_servers(&format!("{}\n{}", server("pay", ""), server("pay", "")), "");
    let e = error_for(&text);
    assert!(e.message.contains("declared twice"), "{e}");
    // An unknown policy names the field.
    let text = with_servers(&server("pay", "undeclared = \"allow\"\n"), "");
    let e = error_for(&text);
    assert_eq!(e.line, line_of(&text, "undeclared = \"allow\""), "{e}");
    // Two servers under their own names could offer one name twice.
    let text = with_servers(
        &format!(
            "{}\n{}",
            server("pay", "prefix = false\n"),
            server("mail", "prefix = false\n")
        ),
        "",
    );
    let e = error_for(&text);
    assert!(e.field.ends_with("prefix"), "{e}");
    assert!(e.message.contains("server `pay` already offers"), "{e}");
    // A zero refresh.
    let text = with_servers(&server("pay", "refresh = \"0s\"\n"), "");
    let e = error_for(&text);
    assert!(e.field.ends_with("refresh"), "{e}");
    // A capability naming a server nobody declared lists the ones there are.
    let text = with_servers(&server("payments", ""), FRONTED_CHARGE);
    let e = error_for(&text);
    assert_eq!(e.line, line_of(&text, "server = \"pay\""), "{e}");
    assert!(
        e.message.contains("no [[mcp_servers]] has alias `pay`"),
        "{e}"
    );
    assert!(e.help.as_deref().unwrap_or("").contains("payments"), "{e}");
    // A server and a url at once.
    let both = FRONTED_CHARGE.replace(
        "server = \"pay\"",
        "server = \"pay\"\nurl = \"http://127.0.0.1:9/x\"",
    );
    let text = with_servers(&server("pay", ""), &both);
    let e = error_for(&text);
    assert!(e.message.contains("uses the server's url"), "{e}");
    // `server` on an HTTP upstream.
    let http = FRONTED_CHARGE.replace("kind = \"mcp\"", "kind = \"http\"");
    let text = with_servers(&server("pay", ""), &http);
    let errors = parse(&text).expect_err("refused");
    assert!(
        errors
            .0
            .iter()
            .any(|e| e.message.contains("applies to kind = \"mcp\" only")),
        "{errors}"
    );
}

#[test]
fn telemetry_is_off_by_default_and_its_fields_are_checked() {
    use oncegate_core::config::TelemetrySettings;

    let r = payments();
    assert_eq!(r.telemetry, TelemetrySettings::default());
    assert_eq!(r.telemetry.service_name, "oncegate");
    assert!(
        r.capabilities()
            .iter()
            .all(|c| c.traced_arguments.is_empty())
    );

    let on = base().replace(
        "name = \"refund\"\n",
        "name = \"refund\"\ntraced_arguments = [\"order_id\"]\n",
    ) + "\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/\"\nservice_name = \"payments-eu\"\n";
    let r = parse(&on).unwrap();
    assert_eq!(
        r.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318/")
    );
    assert_eq!(r.telemetry.service_name, "payments-eu");
    let traced: Vec<&str> = r
        .capability("refund")
        .unwrap()
        .traced_arguments
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(traced, ["order_id"]);
    assert_eq!(
        TelemetrySettings::traces_url("http://127.0.0.1:4318/"),
        "http://127.0.0.1:4318/v1/traces"
    );

    for (table, needle, field, says) in [
        (
            "otlp_endpoint = \"grpc://collector:4317\"",
            "grpc://",
            "telemetry.otlp_endpoint",
            "http:// or https://",
        ),
        (
            "otlp_endpoint = \"collector:4318\"",
            "collector:4318",
            "telemetry.otlp_endpoint",
            "http:// or https://",
        ),
        (
            "otlp_endpoint = \"http://c:4318/?k=v\"",
            "?k=v",
            "telemetry.otlp_endpoint",
            "query",
        ),
        (
            "service_name = \" \"",
            "service_name",
            "telemetry.service_name",
            "empty",
        ),
        (
            "endpoint = \"http://c:4318\"",
            "endpoint",
            "telemetry",
            "endpoint",
        ),
    ] {
        let text = format!("{}\n[telemetry]\n{table}\n", base());
        let e = error_for(&text);
        assert_eq!(e.line, line_of(&text, needle), "{e}");
        assert!(e.field.starts_with(field), "{e}");
        assert!(e.message.contains(says), "{e}");
    }

    let twice = base().replace(
        "name = \"refund\"\n",
        "name = \"refund\"\ntraced_arguments = [\"order_id\", \"order_id\", \"a..b\"]\n",
    );
    let errors = parse(&twice).expect_err("refused").0;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].field, "capabilities[1].traced_arguments[1]");
    assert!(errors[0].message.contains("listed twice"), "{}", errors[0]);
    assert_eq!(errors[1].field, "capabilities[1].traced_arguments[2]");
    assert!(errors[0].line == line_of(&twice, "traced_arguments"));
}

#[test]
fn per_principal_budgets_default_and_refuse_zero_at_their_line() {
    let r = payments();
    assert_eq!(r.gateway.mcp_sessions_per_principal, 64);
    assert_eq!(r.gateway.pending_approvals_per_agent, 100);
    let set = base().replace(
        "listen = \"127.0.0.1:7878\"",
        "listen = \"127.0.0.1:7878\"\nmcp_sessions_per_principal = 8\npending_approvals_per_agent = 3",
    );
    let r = parse(&set).unwrap();
    assert_eq!(
        (
            r.gateway.mcp_sessions_per_principal,
            r.gateway.pending_approvals_per_agent
        ),
        (8, 3)
    );
    for field in ["mcp_sessions_per_principal", "pending_approvals_per_agent"] {
        for bad in ["0", "-1", "5000000000"] {
            let text = base().replace(
                "listen = \"127.0.0.1:7878\"",
                &format!("listen = \"127.0.0.1:7878\"\n{field} = {bad}"),
            );
            let e = error_for(&text);
            assert_eq!(e.field, format!("gateway.{field}"), "{e}");
            assert_eq!(e.line, line_of(&text, &format!("{field} = {bad}")), "{e}");
            assert!(e.to_string().contains("out of range"), "{e}");
        }
    }
}
