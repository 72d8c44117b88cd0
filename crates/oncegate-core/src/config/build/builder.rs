//! The `Builder` every part of the registry is built with: it collects located errors
//! and warnings (never stopping at the first), and reads the values many parts share:
//! durations, templates, bodies.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use serde_json::Value;

use crate::config::locate::{Locator, Seg};
use crate::config::{BodyTemplate, ConfigEnv, ConfigError, ConfigWarning, McpServer};
use crate::template::Template;

/// The timeout of an upstream call or read that names none.
pub(super) const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_secs(10);

fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let d: SignedDuration = text
        .trim()
        .parse()
        .map_err(|e| format!("`{text}` is not a duration ({e})"))?;
    if d.is_negative() {
        return Err(format!("`{text}` is negative"));
    }
    Ok(d)
}

/// How a duration is written, for errors about one.
pub(super) const DURATION_HELP: &str =
    "write durations like \"30s\", \"10m\", \"24h\" or \"1h 30m\"";

pub(super) struct Builder<'a> {
    pub(super) loc: &'a Locator<'a>,
    pub(super) env: &'a dyn ConfigEnv,
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigWarning>,
    /// `[[mcp_servers]]`, built before the capabilities that name them.
    pub(super) servers: Vec<McpServer>,
}

pub(super) fn k(s: &str) -> Seg {
    Seg::Key(s.to_owned())
}

impl Builder<'_> {
    pub(super) fn err(&mut self, path: &[Seg], message: impl Into<String>, help: Option<&str>) {
        let e = self.loc.error(path, message, help);
        self.errors.push(e);
    }

    pub(super) fn warn(&mut self, path: &[Seg], message: impl Into<String>) {
        let e = self.loc.error(path, message, None);
        self.warnings.push(ConfigWarning {
            location: format!("{}:{}", e.file.display(), e.line),
            field: e.field,
            message: e.message,
        });
    }

    pub(super) fn duration(
        &mut self,
        path: &[Seg],
        text: Option<&str>,
        default: SignedDuration,
    ) -> SignedDuration {
        match text.map(parse_duration) {
            None => default,
            Some(Ok(d)) => d,
            Some(Err(msg)) => {
                self.err(path, msg, Some(DURATION_HELP));
                default
            }
        }
    }

    pub(super) fn template(&mut self, path: &[Seg], text: &str) -> Template {
        match Template::parse(text) {
            Ok(t) => t,
            Err(msg) => {
                self.err(path, msg, None);
                Template::parse("").expect("the empty template parses")
            }
        }
    }

    pub(super) fn body(&mut self, path: &mut Vec<Seg>, value: &toml::Value) -> BodyTemplate {
        match value {
            toml::Value::String(s) => BodyTemplate::Text(self.template(path, s)),
            toml::Value::Table(t) => {
                let mut out = BTreeMap::new();
                for (key, v) in t {
                    path.push(Seg::Key(key.clone()));
                    out.insert(key.clone(), self.body(path, v));
                    path.pop();
                }
                BodyTemplate::Object(out)
            }
            toml::Value::Array(items) => {
                let mut out = Vec::new();
                for (i, v) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    out.push(self.body(path, v));
                    path.pop();
                }
                BodyTemplate::Array(out)
            }
            toml::Value::Integer(i) => BodyTemplate::Literal(Value::from(*i)),
            toml::Value::Float(f) => BodyTemplate::Literal(Value::from(*f)),
            toml::Value::Boolean(b) => BodyTemplate::Literal(Value::Bool(*b)),
            toml::Value::Datetime(d) => BodyTemplate::Literal(Value::String(d.to_string())),
        }
    }
}
