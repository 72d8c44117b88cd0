//! Building one capability: its category defaults, key recipe, durations, input schema
//! and the checks that tie them to its upstream and reconciliation read.

use std::collections::BTreeSet;

use iso_currency::Currency;
use jiff::SignedDuration;
use serde_json::Value;

use super::builder::{Builder, DEFAULT_TIMEOUT, k};
use crate::config::locate::Seg;
use crate::config::raw::{NormKind, RawCapability, RawKey, RawSignificant};
use crate::config::{
    AfterWindow, Capability, Category, CrossRun, DEFAULT_LATE_PROCESSING, KeyRecipe, KeyThreading,
    MCP_LATE_ANSWER_LIMIT_SECS, OnUnknown, Reconcile, Scope, SignificantArg, Upstream,
    UpstreamKind,
};
use crate::normalise::{ArgPath, Folding, Normaliser};
use crate::template::{Source, Template};

pub(super) struct Defaults {
    pub(super) replay_window: SignedDuration,
    pub(super) attempt_ceiling: Option<u32>,
    pub(super) cross_run: CrossRun,
    pub(super) after_window: AfterWindow,
}

/// The documented defaults per category (see docs/configuration.md).
pub(super) fn defaults(category: Category) -> Defaults {
    match category {
        Category::Read => Defaults {
            replay_window: SignedDuration::ZERO,
            attempt_ceiling: None,
            cross_run: CrossRun::Allow,
            after_window: AfterWindow::Execute,
        },
        Category::IdempotentWrite => Defaults {
            replay_window: SignedDuration::from_mins(10),
            attempt_ceiling: Some(20),
            cross_run: CrossRun::Allow,
            after_window: AfterWindow::Execute,
        },
        Category::Keyed | Category::NonIdempotent => Defaults {
            replay_window: SignedDuration::from_hours(24),
            attempt_ceiling: Some(10),
            cross_run: CrossRun::RequireApproval,
            after_window: AfterWindow::RequireApproval,
        },
    }
}

pub(super) const DEFAULT_LEASE: SignedDuration = SignedDuration::from_secs(30);
pub(super) const DEFAULT_APPROVAL_TTL: SignedDuration = SignedDuration::from_hours(24);

/// The field path `rest` under `base`.
fn under(base: &[Seg], rest: &[&str]) -> Vec<Seg> {
    let mut p = base.to_vec();
    p.extend(rest.iter().map(|s| k(s)));
    p
}

/// What the checks of a capability's upstream against its timing read of it.
#[derive(Clone, Copy)]
struct Declared<'a> {
    name: &'a str,
    category: Category,
    dry_run: bool,
    lease: SignedDuration,
    /// The settle horizon as written (`None`: the default).
    settle_horizon: Option<SignedDuration>,
}

/// The default settle horizon: the upstream's timeout again plus the time a provider
/// may still work on a request its caller gave up on. An MCP call keeps running after
/// its timeout (up to `MCP_LATE_ANSWER_LIMIT_SECS`) in the process that made it, which
/// another replica cannot see: the horizon covers it too.
fn default_settle_horizon(upstream: Option<&Upstream>) -> SignedDuration {
    let still_running = match upstream.map(|u| u.kind) {
        Some(UpstreamKind::Mcp) => SignedDuration::from_secs(MCP_LATE_ANSWER_LIMIT_SECS as i64),
        _ => SignedDuration::ZERO,
    };
    upstream.map_or(DEFAULT_TIMEOUT, |u| u.timeout) + still_running + DEFAULT_LATE_PROCESSING
}

impl Builder<'_> {
    pub(super) fn capability(&mut self, base: &[Seg], rc: RawCapability) -> Capability {
        let at = |rest: &[&str]| under(base, rest);
        let d = defaults(rc.category);
        if rc.name.is_empty()
            || !rc
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.err(
                &at(&["name"]),
                format!("`{}` is not a valid tool name", rc.name),
                Some("use letters, digits, `_` and `-`"),
            );
        }
        let key = self.key(&at(&["key"]), rc.key);
        let replay_window = self.duration(
            &at(&["replay_window"]),
            rc.replay_window.as_deref(),
            d.replay_window,
        );
        let lease = self.duration(&at(&["lease"]), rc.lease.as_deref(), DEFAULT_LEASE);
        let settle_horizon_raw = rc
            .settle_horizon
            .as_deref()
            .map(|text| self.duration(&at(&["settle_horizon"]), Some(text), SignedDuration::ZERO));
        let approval_ttl = self.duration(
            &at(&["approval_ttl"]),
            rc.approval_ttl.as_deref(),
            DEFAULT_APPROVAL_TTL,
        );
        if lease.is_zero() {
            self.err(
                &at(&["lease"]),
                "a zero lease would let every repeat take over a live call",
                Some("use a lease longer than the upstream timeout"),
            );
        }
        if rc.attempt_ceiling == Some(0) {
            self.err(
                &at(&["attempt_ceiling"]),
                "an attempt ceiling of 0 refuses every call",
                Some("use at least 1, or remove the field for the category default"),
            );
        }
        let upstream = rc
            .upstream
            .map(|u| self.upstream(&at(&["upstream"]), rc.category, u));
        let reconcile = rc
            .reconcile
            .map(|r| self.reconcile(&at(&["reconcile"]), upstream.as_ref(), r));
        let input_schema = self.input_schema(base, rc.input_schema.as_ref());
        let duplicates = rc
            .duplicates
            .map(|d| self.duplicates(&at(&["duplicates"]), &rc.name, rc.category, &key, d));
        let listing = rc.listing.map(|l| self.listing(&at(&["listing"]), l));
        if let Some(l) = &listing {
            self.check_listing_covers(base, &key, duplicates.as_ref(), l);
        }
        let limits = self.capability_limits(base, &rc.name, rc.category, &key, rc.limits);
        self.check_templates_name_key(base, upstream.as_ref(), reconcile.as_ref(), &key);
        self.check_key_recipe(base, &rc.name, rc.category, &key);
        let declared = Declared {
            name: &rc.name,
            category: rc.category,
            dry_run: rc.dry_run.unwrap_or(false),
            lease,
            settle_horizon: settle_horizon_raw,
        };
        self.check_timing(base, declared, upstream.as_ref(), reconcile.as_ref());
        let on_unknown = self.on_unknown(base, rc.on_unknown, rc.category, reconcile.is_some());
        let traced_arguments = self.traced_arguments(base, rc.traced_arguments);
        Capability {
            name: rc.name,
            description: rc.description,
            category: rc.category,
            key_principal: rc.key_principal.unwrap_or_default(),
            key,
            replay_window,
            attempt_ceiling: rc.attempt_ceiling.or(d.attempt_ceiling),
            lease,
            // The default: the upstream's timeout again plus the time a provider may
            // still work on a request its caller gave up on. An MCP call keeps running
            // after its timeout (up to MCP_LATE_ANSWER_LIMIT_SECS) in the process that
            // made it, which another replica cannot see: the horizon covers it too.
            settle_horizon: settle_horizon_raw
                .unwrap_or_else(|| default_settle_horizon(upstream.as_ref())),
            approval_ttl,
            on_unknown,
            cross_run: rc.cross_run.unwrap_or(d.cross_run),
            after_window: rc.after_window.unwrap_or(d.after_window),
            dry_run: rc.dry_run.unwrap_or(false),
            require_client_key: rc.require_client_key.unwrap_or(false),
            long_running: rc.long_running.unwrap_or(false),
            upstream,
            reconcile,
            duplicates,
            listing,
            limits,
            traced_arguments,
            policy: None,
            policy_file: rc.policy,
            input_schema,
        }
    }

    /// Every `{norm.<arg>}` in the upstream's and the reconciliation read's templates
    /// names a significant argument of the key.
    fn check_templates_name_key(
        &mut self,
        base: &[Seg],
        upstream: Option<&Upstream>,
        reconcile: Option<&Reconcile>,
        key: &KeyRecipe,
    ) {
        let known: BTreeSet<String> = key
            .significant
            .iter()
            .map(|s| s.path.as_str().to_owned())
            .collect();
        if let Some(up) = upstream {
            let mut templates = vec![&up.url];
            templates.extend(up.headers.values());
            if let Some(b) = &up.body {
                b.templates(&mut templates);
            }
            for t in templates {
                self.check_norm_refs(&under(base, &["upstream"]), t, &known);
            }
        }
        if let Some(r) = reconcile {
            let mut templates = vec![&r.url];
            templates.extend(r.headers.values());
            if let Some(b) = &r.arguments {
                b.templates(&mut templates);
            }
            for t in templates {
                self.check_norm_refs(&under(base, &["reconcile"]), t, &known);
            }
        }
    }

    /// A `non_idempotent` capability's key must tell two intents apart, and not by free
    /// text alone.
    fn check_key_recipe(&mut self, base: &[Seg], name: &str, category: Category, key: &KeyRecipe) {
        let at = |rest: &[&str]| under(base, rest);
        if category == Category::NonIdempotent
            && key.business_ref.is_none()
            && key.significant.is_empty()
        {
            self.err(&at(&["key"]), format!("`{name}` is non_idempotent but has no key recipe: every call would be a new intent"), Some("declare [capabilities.key] with a business_ref (order id, message id) and/or significant arguments"));
        }
        if category == Category::NonIdempotent
            && key.business_ref.is_none()
            && !key.significant.is_empty()
            && key
                .significant
                .iter()
                .all(|s| matches!(s.normaliser, Normaliser::Text { .. }))
        {
            // A re-plan rewords free text ("Your receipt" / "Here is your receipt"), so a
            // key made of it alone turns every re-plan into a new email.
            self.err(
                &at(&["key", "significant"]),
                format!("`{name}` is non_idempotent and keyed on free text alone: a re-plan that rewords the text is a new intent, and the effect happens again"),
                Some("declare a business_ref (order id, message id), or a significant argument that is not free text (an id, an email, an enum)"),
            );
        }
    }

    /// The upstream must receive a `keyed` capability's key, and its timeout must fit in
    /// the lease and the settle horizon; a consequential capability without an upstream
    /// is claim-only, and without a reconciliation read a dead claim waits for a human.
    fn check_timing(
        &mut self,
        base: &[Seg],
        rc: Declared<'_>,
        upstream: Option<&Upstream>,
        reconcile: Option<&Reconcile>,
    ) {
        let at = |rest: &[&str]| under(base, rest);
        let Declared {
            lease,
            settle_horizon,
            ..
        } = rc;
        if let Some(up) = upstream {
            if rc.category == Category::Keyed && up.idempotency == KeyThreading::None {
                self.err(&at(&["upstream", "idempotency"]), format!("`{}` is keyed but its upstream does not receive the key", rc.name), Some("set idempotency = \"header\" (HTTP), \"meta\" or \"argument\" (MCP), or make the capability non_idempotent"));
            }
            if lease <= up.timeout {
                self.warn(&at(&["lease"]), format!("the lease ({lease:#}) is not longer than the upstream timeout ({:#}): a repeat may see a live call as unknown", up.timeout));
            }
            if let Some(h) = settle_horizon
                && h < up.timeout
                && rc.category == Category::NonIdempotent
            {
                self.warn(&at(&["settle_horizon"]), format!("the settle horizon ({h:#}) is shorter than the upstream timeout ({:#}): a request the provider finishes late may land after oncegate concluded it never happened, and execute a second time", up.timeout));
            }
        } else if rc.category.is_consequential() && reconcile.is_none() && !rc.dry_run {
            // Claim-only: its callers execute it (POST /v1/intents/claim). Without a
            // reconciliation read, a claim whose lease expires unanswered is escalated.
            self.warn(
                &at(&["upstream"]),
                format!(
                    "`{}` has no upstream (claim-only: its callers execute it through POST /v1/intents/claim) and no [capabilities.reconcile] read: a claim that dies without completing waits for a human",
                    rc.name
                ),
            );
        }
    }

    /// `on_unknown`, or the category's default (reconcile when there is a read); a
    /// `non_idempotent` capability never retries.
    fn on_unknown(
        &mut self,
        base: &[Seg],
        declared: Option<OnUnknown>,
        category: Category,
        has_reconcile: bool,
    ) -> OnUnknown {
        let at = under(base, &["on_unknown"]);
        let on_unknown = match declared {
            Some(v) => v,
            None => match (category, has_reconcile) {
                (_, true) => OnUnknown::Reconcile,
                (Category::Read | Category::IdempotentWrite | Category::Keyed, false) => {
                    OnUnknown::Retry
                }
                (Category::NonIdempotent, false) => OnUnknown::Escalate,
            },
        };
        if on_unknown == OnUnknown::Retry && category == Category::NonIdempotent {
            self.err(&at, "a non_idempotent capability cannot retry an unknown outcome: that is how customers are charged twice", Some("use \"reconcile\" (with a [capabilities.reconcile] read), \"escalate\" or \"refuse\""));
        }
        if on_unknown == OnUnknown::Reconcile && !has_reconcile {
            self.warn(&at, "on_unknown = \"reconcile\" without a [capabilities.reconcile] read: every unknown outcome escalates to a human");
        }
        on_unknown
    }

    /// `traced_arguments`: argument paths whose values the decision span may carry.
    fn traced_arguments(&mut self, base: &[Seg], raw: Option<Vec<String>>) -> Vec<ArgPath> {
        let mut paths = Vec::new();
        for (i, text) in raw.unwrap_or_default().into_iter().enumerate() {
            let at = [base, &[k("traced_arguments"), Seg::Index(i)]].concat();
            match ArgPath::parse(&text) {
                Ok(p) if paths.contains(&p) => {
                    self.err(&at, format!("`{p}` is listed twice"), None);
                }
                Ok(p) => paths.push(p),
                Err(msg) => self.err(
                    &at,
                    msg,
                    Some("name arguments like \"order_id\" or \"customer.country\""),
                ),
            }
        }
        paths
    }

    /// An agent-facing JSON Schema written in TOML: a table whose `type` is "object".
    fn input_schema(&mut self, base: &[Seg], raw: Option<&toml::Value>) -> Option<Value> {
        let raw = raw?;
        let at = [base, &[k("input_schema")]].concat();
        let value = match serde_json::to_value(raw) {
            Ok(v) => v,
            Err(e) => {
                self.err(&at, format!("not expressible as JSON: {e}"), None);
                return None;
            }
        };
        if value.get("type").and_then(Value::as_str) != Some("object") {
            self.err(
                &at,
                "a tool's input schema must be a JSON Schema object",
                Some("input_schema = { type = \"object\", properties = { order_id = { type = \"string\" } }, required = [\"order_id\"] }"),
            );
            return None;
        }
        Some(value)
    }

    fn key(&mut self, base: &[Seg], raw: Option<RawKey>) -> KeyRecipe {
        let Some(raw) = raw else {
            return KeyRecipe {
                business_ref: None,
                significant: Vec::new(),
                scope: Scope::Global,
                every_argument: false,
            };
        };
        let at = |rest: &[Seg]| [base, rest].concat();
        let business_ref = raw.business_ref.and_then(|p| match ArgPath::parse(&p) {
            Ok(p) => Some(p),
            Err(msg) => {
                self.err(&at(&[k("business_ref")]), msg, None);
                None
            }
        });
        let mut significant = Vec::new();
        let mut names = BTreeSet::new();
        for (i, s) in raw.significant.into_iter().enumerate() {
            let here = at(&[k("significant"), Seg::Index(i)]);
            let field = |f: &str| [here.clone(), vec![k(f)]].concat();
            let path = match ArgPath::parse(&s.arg) {
                Ok(p) => p,
                Err(msg) => {
                    self.err(&field("arg"), msg, None);
                    continue;
                }
            };
            if !names.insert(path.clone()) {
                self.err(&field("arg"), format!("`{path}` is declared twice"), None);
            }
            self.check_options_apply(&here, &s);
            let normaliser = self.normaliser(&here, &s);
            significant.push(SignificantArg {
                path,
                normaliser,
                optional: s.optional.unwrap_or(false),
            });
        }
        KeyRecipe {
            business_ref,
            significant,
            scope: raw.scope.unwrap_or_default(),
            every_argument: false,
        }
    }

    /// Each option applies to the normalisers that read it only.
    fn check_options_apply(&mut self, here: &[Seg], s: &RawSignificant) {
        let field = |f: &str| [here, &[k(f)]].concat();
        let misplaced = |name: &str, set: bool, allowed: &[NormKind]| {
            (set && !allowed.contains(&s.kind)).then(|| name.to_owned())
        };
        for bad in [
            misplaced("currency_arg", s.currency_arg.is_some(), &[NormKind::Money]),
            misplaced(
                "default_currency",
                s.default_currency.is_some(),
                &[NormKind::Money],
            ),
            misplaced("unit", s.unit.is_some(), &[NormKind::Money]),
            misplaced(
                "allow_negative",
                s.allow_negative.is_some(),
                &[NormKind::Money],
            ),
            misplaced(
                "case_fold",
                s.case_fold.is_some(),
                &[NormKind::Text, NormKind::Id],
            ),
            misplaced("width_fold", s.width_fold.is_some(), &[NormKind::Id]),
            misplaced("values", s.values.is_some(), &[NormKind::Enum]),
        ]
        .into_iter()
        .flatten()
        {
            self.err(
                &field(&bad),
                format!("`{bad}` does not apply to this normaliser"),
                Some("see docs/configuration.md for each normaliser's options"),
            );
        }
    }

    /// A significant argument's normaliser, with its options.
    fn normaliser(&mut self, here: &[Seg], s: &RawSignificant) -> Normaliser {
        let field = |f: &str| [here, &[k(f)]].concat();
        match s.kind {
            NormKind::Money => {
                let currency_arg =
                    s.currency_arg
                        .as_deref()
                        .and_then(|c| match ArgPath::parse(c) {
                            Ok(p) => Some(p),
                            Err(msg) => {
                                self.err(&field("currency_arg"), msg, None);
                                None
                            }
                        });
                let default_currency = s.default_currency.as_deref().and_then(|c| {
                    let found = Currency::from_code(&c.trim().to_ascii_uppercase());
                    if found.is_none() {
                        self.err(
                            &field("default_currency"),
                            format!("`{c}` is not an ISO 4217 currency code"),
                            Some("e.g. \"USD\", \"EUR\", \"JPY\""),
                        );
                    }
                    found
                });
                Normaliser::Money {
                    currency_arg,
                    default_currency,
                    unit: s.unit.unwrap_or_default(),
                    allow_negative: s.allow_negative.unwrap_or(false),
                }
            }
            NormKind::Email => Normaliser::Email,
            NormKind::Text => Normaliser::Text {
                case_fold: s.case_fold.unwrap_or(false),
            },
            NormKind::Integer => Normaliser::Integer,
            NormKind::Decimal => Normaliser::Decimal,
            NormKind::Enum => {
                let values = s.values.clone().unwrap_or_default();
                if values.is_empty() {
                    self.err(
                        &field("type"),
                        "an enum needs `values`",
                        Some("values = [\"standard\", \"express\"]"),
                    );
                }
                Normaliser::Enum { values }
            }
            NormKind::Set => Normaliser::Set,
            NormKind::Id => Normaliser::Id {
                folding: Folding {
                    case: s.case_fold.unwrap_or(false),
                    width: s.width_fold.unwrap_or(false),
                },
            },
        }
    }

    fn check_norm_refs(&mut self, path: &[Seg], template: &Template, known: &BTreeSet<String>) {
        for source in template.sources() {
            if let Source::Norm { name, .. } = source
                && !known.contains(name)
            {
                self.err(
                    path,
                    format!("`{{norm.{name}}}` names no significant argument"),
                    Some("declare it under [[capabilities.key.significant]] or use {arg.PATH}"),
                );
            }
        }
    }
}
