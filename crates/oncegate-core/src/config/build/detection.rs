//! Building a capability's duplicate rule, upstream listing and limits, each checked
//! against the key recipe it compares or sums.

use std::collections::BTreeMap;
use std::str::FromStr;

use iso_currency::Currency;
use jiff::SignedDuration;
use serde_json::Value;

use super::builder::{Builder, DEFAULT_TIMEOUT, k};
use crate::config::locate::Seg;
use crate::config::raw::{RawDuplicates, RawLimit, RawListing, RawMax};
use crate::config::{
    Category, DuplicateRule, Escalation, HoldOn, KeyRecipe, Limit, LimitPer, Listing, MatchOn,
    Measure, OverLimit, UpstreamKind,
};
use crate::normalise::Normaliser;
use crate::template::{Part, Source};

/// The shortest `every`: the scheduler's own tick.
const MIN_EVERY: SignedDuration = SignedDuration::from_secs(1);

fn at(base: &[Seg], rest: &[&str]) -> Vec<Seg> {
    [base, &rest.iter().map(|s| k(s)).collect::<Vec<_>>()].concat()
}

/// Messaging: a capability keyed on an email address (the 1 h default frequency).
fn is_messaging(key: &KeyRecipe) -> bool {
    key.significant
        .iter()
        .any(|s| matches!(s.normaliser, Normaliser::Email))
}

impl Builder<'_> {
    pub(super) fn duplicates(
        &mut self,
        base: &[Seg],
        name: &str,
        category: Category,
        key: &KeyRecipe,
        raw: RawDuplicates,
    ) -> DuplicateRule {
        if category == Category::Read {
            self.err(
                &at(base, &[]),
                "a read capability has no effects to compare",
                Some("remove [capabilities.duplicates], or give the rule to the capability that writes"),
            );
        }
        let significant = |arg: &str| key.significant.iter().any(|s| s.path.as_str() == arg);
        let mut on = Vec::new();
        for (i, field) in raw.on.iter().enumerate() {
            let path = [at(base, &["on"]), vec![Seg::Index(i)]].concat();
            if field == "business_ref" {
                if key.business_ref.is_none() {
                    self.err(&path, "the capability's key recipe has no business_ref to compare", Some("declare [capabilities.key] business_ref, or compare significant arguments"));
                }
                on.push(MatchOn::BusinessRef);
            } else if significant(field) {
                on.push(MatchOn::Arg(field.clone()));
            } else {
                let known: Vec<&str> = key.significant.iter().map(|s| s.path.as_str()).collect();
                self.err(
                    &path,
                    format!("`{field}` is neither business_ref nor a significant argument of `{name}` (significant: {known:?})"),
                    Some("a duplicate rule compares normalised values: add the argument to [capabilities.key] significant first"),
                );
            }
        }
        if on.is_empty() {
            self.err(
                &at(base, &["on"]),
                "a duplicate rule must compare at least one value",
                Some("e.g. on = [\"business_ref\", \"amount\"]"),
            );
        }
        let within = self.duration(
            &at(base, &["within"]),
            Some(&raw.within),
            SignedDuration::ZERO,
        );
        if within <= SignedDuration::ZERO {
            self.err(
                &at(base, &["within"]),
                "`within` must be longer than zero",
                Some("e.g. within = \"24h\""),
            );
        }
        let default_every = if is_messaging(key) {
            SignedDuration::from_hours(1)
        } else {
            SignedDuration::from_mins(15)
        };
        let every = self.duration(&at(base, &["every"]), raw.every.as_deref(), default_every);
        if every < MIN_EVERY {
            self.err(
                &at(base, &["every"]),
                format!("`every` must be at least {MIN_EVERY:#}"),
                None,
            );
        }
        let hold = match raw.hold.as_deref() {
            None if key.business_ref.is_some() => HoldOn::BusinessRef,
            None => HoldOn::Capability,
            Some("capability") => HoldOn::Capability,
            Some("business_ref") => {
                if key.business_ref.is_none() {
                    self.err(
                        &at(base, &["hold"]),
                        "the key recipe has no business_ref to hold on",
                        Some("hold = \"capability\", or a significant argument"),
                    );
                }
                HoldOn::BusinessRef
            }
            Some(arg) => {
                if !raw.on.iter().any(|o| o == arg) {
                    self.err(
                        &at(base, &["hold"]),
                        format!("`{arg}` is not one of the values the rule compares (`on`)"),
                        Some("hold on business_ref, capability, or an argument listed in `on`"),
                    );
                }
                HoldOn::Arg(arg.to_owned())
            }
        };
        DuplicateRule {
            name: name.to_owned(),
            on,
            within,
            every,
            escalation: raw.escalation.unwrap_or(Escalation::Alert),
            hold,
        }
    }

    pub(super) fn listing(&mut self, base: &[Seg], raw: RawListing) -> Listing {
        let url = match &raw.url {
            Some(u) => self.template(&at(base, &["url"]), u),
            None => {
                self.err(
                    &at(base, &["url"]),
                    "a listing needs a url",
                    Some("e.g. url = \"{env.PROVIDER_URL}/v1/effects\" (HTTP) or the MCP endpoint"),
                );
                crate::template::Template::parse("").expect("the empty template parses")
            }
        };
        // One listing serves every intent: nothing of a call can be in it.
        if url
            .parts()
            .iter()
            .any(|p| matches!(p, Part::Placeholder(s) if !matches!(s, Source::Env(_))))
        {
            self.err(
                &at(base, &["url"]),
                "a listing URL may only use {env.*} placeholders",
                Some("the gateway adds the since, cursor and page-size parameters itself"),
            );
        }
        if raw.kind == UpstreamKind::Mcp && raw.tool.is_none() {
            self.err(
                &at(base, &["tool"]),
                "an MCP listing needs the read-only tool to call",
                None,
            );
        }
        let mut pointers = vec![
            ("items", raw.items.as_deref()),
            ("next", raw.next.as_deref()),
            ("effect_ref", Some(raw.effect_ref.as_str())),
            ("key", raw.key.as_deref()),
            ("at", raw.at.as_deref()),
        ];
        for (field, p) in pointers.drain(..) {
            self.check_pointer(&at(base, &[field]), p);
        }
        let arguments = self.listing_arguments(&mut at(base, &["arguments"]), &raw.arguments);
        let timeout = self.duration(
            &at(base, &["timeout"]),
            raw.timeout.as_deref(),
            DEFAULT_TIMEOUT,
        );
        let page_size = raw.page_size.unwrap_or(100);
        if page_size == 0 || page_size > 10_000 {
            self.err(
                &at(base, &["page_size"]),
                "page_size must be between 1 and 10000",
                None,
            );
        }
        let headers = self.headers(base, raw.headers);
        Listing {
            kind: raw.kind,
            url,
            headers,
            tool: raw.tool,
            timeout: timeout.unsigned_abs(),
            since_param: raw.since_param.unwrap_or_else(|| "since".into()),
            cursor_param: raw.cursor_param.unwrap_or_else(|| "after".into()),
            limit_param: raw.limit_param.unwrap_or_else(|| "limit".into()),
            page_size,
            params: raw.params,
            items: raw.items.unwrap_or_else(|| "/effects".into()),
            next: raw.next.unwrap_or_else(|| "/next".into()),
            effect_ref: raw.effect_ref,
            key: raw.key,
            at: raw.at.unwrap_or_else(|| "/at".into()),
            arguments,
        }
    }

    /// The arguments mapping: tables as objects, strings as JSON pointers.
    fn listing_arguments(&mut self, path: &mut Vec<Seg>, value: &toml::Value) -> Value {
        match value {
            toml::Value::String(p) => {
                self.check_pointer(path, Some(p));
                Value::String(p.clone())
            }
            toml::Value::Table(t) => {
                let mut map = serde_json::Map::new();
                for (name, v) in t {
                    path.push(Seg::Key(name.clone()));
                    map.insert(name.clone(), self.listing_arguments(path, v));
                    path.pop();
                }
                Value::Object(map)
            }
            _ => {
                self.err(path, "each leaf of a listing's arguments is a JSON pointer into one effect", Some("e.g. arguments = { order_id = \"/order_id\", amount = { minor = \"/amount_minor\", currency = \"/currency\" } }"));
                Value::Null
            }
        }
    }

    pub(super) fn capability_limits(
        &mut self,
        base: &[Seg],
        name: &str,
        category: Category,
        key: &KeyRecipe,
        raw: Vec<RawLimit>,
    ) -> Vec<Limit> {
        let mut limits = Vec::new();
        for (i, rl) in raw.into_iter().enumerate() {
            let base = [base, &[k("limits"), Seg::Index(i)]].concat();
            if category == Category::Read {
                self.err(
                    &base,
                    "a read capability executes nothing a limit could reserve",
                    None,
                );
            }
            let measure = self.limit_measure(&base, name, key, &rl);
            let max = self.limit_max(&base, &measure, &rl.max);
            let window = self.duration(
                &at(&base, &["window"]),
                Some(&rl.window),
                SignedDuration::ZERO,
            );
            if window <= SignedDuration::ZERO {
                self.err(
                    &at(&base, &["window"]),
                    "a limit's window must be longer than zero",
                    Some("e.g. window = \"24h\""),
                );
            }
            let per = rl.per.unwrap_or(LimitPer::Capability);
            let default_name = match (&measure, per) {
                (Measure::Count, LimitPer::Capability) => format!("{name}.count"),
                (Measure::Count, LimitPer::Principal) => format!("{name}.count_per_agent"),
                (Measure::Money { .. }, LimitPer::Capability) => format!("{name}.spend"),
                (Measure::Money { .. }, LimitPer::Principal) => format!("{name}.spend_per_agent"),
            };
            let limit_name = rl.name.unwrap_or(default_name);
            if limit_name.is_empty()
                || limit_name.contains('@')
                || limit_name.contains(char::is_whitespace)
            {
                self.err(
                    &at(&base, &["name"]),
                    format!("`{limit_name}` is not a valid limit name"),
                    Some("letters, digits, `_`, `-` and `.`"),
                );
            }
            limits.push(Limit {
                name: limit_name,
                measure,
                max,
                window,
                per,
                over: rl.over.unwrap_or(OverLimit::Refuse),
            });
        }
        limits
    }

    /// What a limit measures: a count of calls, or (`argument` naming a significant
    /// money argument) the amount spent in one currency.
    fn limit_measure(
        &mut self,
        base: &[Seg],
        name: &str,
        key: &KeyRecipe,
        rl: &RawLimit,
    ) -> Measure {
        match &rl.argument {
            None => Measure::Count,
            Some(arg) => {
                let found = key.significant.iter().find(|s| s.path.as_str() == arg);
                match found.map(|s| &s.normaliser) {
                    Some(Normaliser::Money {
                        default_currency, ..
                    }) => {
                        let currency = match rl.currency.as_deref() {
                            Some(code) => Currency::from_code(&code.to_ascii_uppercase()).unwrap_or_else(|| {
                                self.err(&at(base, &["currency"]), format!("`{code}` is not an ISO 4217 currency"), None);
                                Currency::USD
                            }),
                            None => default_currency.unwrap_or_else(|| {
                                self.err(&at(base, &["currency"]), "a money limit needs a currency (the argument has no default_currency)", Some("currency = \"USD\""));
                                Currency::USD
                            }),
                        };
                        Measure::Money {
                            arg: arg.clone(),
                            currency,
                        }
                    }
                    Some(other) => {
                        self.err(
                            &at(base, &["argument"]),
                            format!(
                                "`{arg}` is a {} argument: a spend limit sums a money argument",
                                other.type_name()
                            ),
                            Some("remove `argument` for a count limit"),
                        );
                        Measure::Count
                    }
                    None => {
                        self.err(&at(base, &["argument"]), format!("`{arg}` is not a significant argument of `{name}`"), Some("a limit sums the normalised amount: declare it in [capabilities.key] significant with type = \"money\""));
                        Measure::Count
                    }
                }
            }
        }
    }

    /// A limit's most: a positive count, or a positive amount in the limit's currency
    /// (as minor units).
    fn limit_max(&mut self, base: &[Seg], measure: &Measure, raw: &RawMax) -> i64 {
        match (measure, raw) {
            (Measure::Count, RawMax::Count(n)) if *n > 0 => *n,
            (Measure::Count, RawMax::Count(_)) => {
                self.err(
                    &at(base, &["max"]),
                    "a limit of 0 or less refuses every call",
                    Some("use at least 1, or a kill switch to stop the capability"),
                );
                1
            }
            (Measure::Count, RawMax::Amount(text)) => {
                self.err(
                    &at(base, &["max"]),
                    format!("a count limit's max is a whole number, not `{text}`"),
                    Some("max = 200, or add `argument` for a spend limit"),
                );
                1
            }
            (Measure::Money { currency, .. }, raw_max) => {
                let text = match raw_max {
                    RawMax::Amount(t) => t.clone(),
                    RawMax::Count(n) => n.to_string(),
                };
                match minor_units(&text, *currency) {
                    Ok(m) if m > 0 => m,
                    Ok(_) => {
                        self.err(
                            &at(base, &["max"]),
                            "a spend limit of 0 or less refuses every call",
                            None,
                        );
                        1
                    }
                    Err(why) => {
                        self.err(
                            &at(base, &["max"]),
                            why,
                            Some("max = \"5000.00\" (in the limit's currency, major units)"),
                        );
                        1
                    }
                }
            }
        }
    }

    /// A capability's listing must map what its rule compares.
    pub(super) fn check_listing_covers(
        &mut self,
        base: &[Seg],
        key: &KeyRecipe,
        rule: Option<&DuplicateRule>,
        listing: &Listing,
    ) {
        let Some(rule) = rule else {
            self.err(&at(base, &["listing"]), "a listing without [capabilities.duplicates] has nothing to compare upstream effects with", Some("declare the duplicate rule, e.g. on = [\"business_ref\", \"amount\"]"));
            return;
        };
        let mapped = |root: &str| listing.arguments.get(root).is_some();
        for on in &rule.on {
            let root = match on {
                MatchOn::BusinessRef => key.business_ref.as_ref().map(|p| p.root().to_owned()),
                MatchOn::Arg(a) => key
                    .significant
                    .iter()
                    .find(|s| s.path.as_str() == a)
                    .map(|s| s.path.root().to_owned()),
            };
            if let Some(root) = root
                && !mapped(&root)
            {
                self.err(
                    &at(base, &["listing", "arguments"]),
                    format!("the duplicate rule compares `{}`, but the listing's arguments map no `{root}`", on.name()),
                    Some("map every argument the rule compares to a JSON pointer into an upstream effect"),
                );
            }
        }
    }
}

/// `"5000.00"` in `currency` as minor units.
fn minor_units(text: &str, currency: Currency) -> Result<i64, String> {
    let d = rust_decimal::Decimal::from_str(text.trim())
        .map_err(|_| format!("`{text}` is not an amount"))?;
    let exp = u32::from(currency.exponent().unwrap_or(0));
    if d.normalize().scale() > exp {
        return Err(format!(
            "`{text}` has more decimal places than {} allows",
            currency.code()
        ));
    }
    let minor = d * rust_decimal::Decimal::from(10_i64.pow(exp));
    i64::try_from(minor.trunc()).map_err(|_| format!("`{text}` is too large"))
}

/// Limit names are unique in the registry (they name stored budgets).
pub(super) fn duplicate_limit_names(
    caps: &[crate::config::Capability],
) -> Vec<(usize, usize, String)> {
    let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
    let mut dupes = Vec::new();
    for (ci, cap) in caps.iter().enumerate() {
        for (li, limit) in cap.limits.iter().enumerate() {
            if seen.insert(&limit.name, ()).is_some() {
                dupes.push((ci, li, limit.name.clone()));
            }
        }
    }
    dupes
}
