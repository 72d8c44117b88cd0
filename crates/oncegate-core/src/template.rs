//! `{placeholder}` templates for upstream URLs, headers, bodies and reconciliation reads.
//!
//! Parsed and checked at config load so a typo fails `check-config`, not a payment at
//! 3 a.m. Rendering is done by the gateway, which owns the wire; this module only knows
//! what a template refers to.

use std::fmt;

use crate::normalise::ArgPath;

/// What a placeholder reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `{arg.path}`: a raw call argument.
    Arg(ArgPath),
    /// `{norm.name}` or `{norm.name.field}`: a normalised significant argument
    /// (`{norm.amount.minor}`, `{norm.amount.currency}`).
    Norm {
        /// The significant argument's path as declared.
        name: String,
        /// A field of the normalised value, for money.
        field: Option<String>,
    },
    /// `{key}`: the idempotency key threaded upstream.
    Key,
    /// `{business_ref}`: the normalised business reference.
    BusinessRef,
    /// `{env.NAME}`: a credential or URL from the gateway's environment.
    Env(String),
    /// `{run_id}` / `{step_id}`: the orchestrator's structural ids.
    RunId,
    /// See [`Source::RunId`].
    StepId,
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Text copied as is.
    Literal(String),
    /// A placeholder.
    Placeholder(Source),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    raw: String,
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`; `{{` and `}}` escape braces.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|(_, c)| *c) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let rest = &text[i + 1..];
                    let end = rest
                        .find('}')
                        .ok_or_else(|| format!("unclosed `{{` at byte {i} in `{text}`"))?;
                    let name = &rest[..end];
                    for _ in 0..name.chars().count() + 1 {
                        chars.next();
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Placeholder(parse_source(name)?));
                }
                '}' => return Err(format!("stray `}}` at byte {i} in `{text}`; write `}}}}`")),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self {
            raw: text.to_owned(),
            parts,
        })
    }

    /// The parts in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The placeholders this template reads.
    pub fn sources(&self) -> impl Iterator<Item = &Source> {
        self.parts.iter().filter_map(|p| match p {
            Part::Placeholder(s) => Some(s),
            Part::Literal(_) => None,
        })
    }

    /// The single placeholder when the template is exactly one (so a body field keeps
    /// the value's JSON type instead of becoming a string).
    pub fn as_single(&self) -> Option<&Source> {
        match self.parts.as_slice() {
            [Part::Placeholder(s)] => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

fn parse_source(name: &str) -> Result<Source, String> {
    let name = name.trim();
    let help = "placeholders are {arg.PATH}, {norm.NAME[.minor|.currency]}, {key}, \
                {business_ref}, {env.NAME}, {run_id}, {step_id}";
    match name {
        "key" => return Ok(Source::Key),
        "business_ref" => return Ok(Source::BusinessRef),
        "run_id" => return Ok(Source::RunId),
        "step_id" => return Ok(Source::StepId),
        _ => {}
    }
    let (head, tail) = name
        .split_once('.')
        .ok_or_else(|| format!("unknown placeholder `{{{name}}}`; {help}"))?;
    match head {
        "arg" => Ok(Source::Arg(ArgPath::parse(tail)?)),
        "env"
            if !tail.is_empty() && tail.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Ok(Source::Env(tail.to_owned()))
        }
        "norm" => {
            let (name, field) = match tail.rsplit_once('.') {
                Some((n, f @ ("minor" | "currency"))) => (n, Some(f.to_owned())),
                _ => (tail, None),
            };
            Ok(Source::Norm {
                name: name.to_owned(),
                field,
            })
        }
        _ => Err(format!("unknown placeholder `{{{name}}}`; {help}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placeholders_and_escapes() {
        let t = Template::parse("{env.BASE}/charges/{key}?x={{y}}").unwrap();
        assert_eq!(
            t.parts(),
            &[
                Part::Placeholder(Source::Env("BASE".into())),
                Part::Literal("/charges/".into()),
                Part::Placeholder(Source::Key),
                Part::Literal("?x={y}".into()),
            ]
        );
        let n = Template::parse("{norm.amount.minor}").unwrap();
        assert_eq!(
            n.as_single(),
            Some(&Source::Norm {
                name: "amount".into(),
                field: Some("minor".into())
            })
        );
        assert!(Template::parse("{nope}").is_err());
        assert!(Template::parse("{key").is_err());
        assert!(Template::parse("a}b").is_err());
    }
}
