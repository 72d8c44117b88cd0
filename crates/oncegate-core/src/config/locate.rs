//! Locating config errors: byte offsets and field paths to file:line:column, using toml's
//! spanned document, and the help line for serde's own messages.

use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// Maps field paths and byte offsets to lines, using toml's spanned document.
pub(super) struct Locator<'a> {
    pub(super) file: &'a Path,
    text: &'a str,
    doc: Option<DeTable<'a>>,
}

#[derive(Clone, Debug)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

fn display_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl<'a> Locator<'a> {
    pub(super) fn new(file: &'a Path, text: &'a str) -> Self {
        let doc = DeTable::parse(text).ok().map(|t| t.into_inner());
        Self { file, text, doc }
    }

    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    /// The span of the deepest existing prefix of `path` (key spans for table keys).
    fn span_of(&self, path: &[Seg]) -> Option<std::ops::Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best = None;
        let mut table: Option<&DeTable<'_>> = Some(doc);
        let mut value: Option<&DeValue<'_>> = None;
        for seg in path {
            match seg {
                Seg::Key(k) => {
                    let t = match (table, value) {
                        (Some(t), None) => t,
                        (_, Some(DeValue::Table(t))) => t,
                        _ => break,
                    };
                    let Some((key, v)) = t
                        .iter()
                        .find(|(key, _)| key.get_ref().as_ref() == k.as_str())
                    else {
                        break;
                    };
                    best = Some(key.span());
                    value = Some(v.get_ref());
                    table = None;
                }
                Seg::Index(i) => {
                    let Some(DeValue::Array(items)) = value else {
                        break;
                    };
                    let Some(item) = items.get(*i) else { break };
                    // An array of tables has no useful span of its own for `[[x]]`;
                    // point at its first key instead.
                    best = match item.get_ref() {
                        DeValue::Table(t) => t
                            .iter()
                            .map(|(k, _)| k.span())
                            .min_by_key(|s| s.start)
                            .or(Some(item.span())),
                        _ => Some(item.span()),
                    };
                    value = Some(item.get_ref());
                }
            }
        }
        best
    }

    /// The field path whose value contains `offset`, for serde errors.
    pub(super) fn path_at(&self, offset: usize) -> String {
        fn contains(value: &toml::Spanned<DeValue<'_>>, offset: usize) -> bool {
            value.span().contains(&offset)
                || match value.get_ref() {
                    DeValue::Table(t) => t
                        .iter()
                        .any(|(k, v)| k.span().contains(&offset) || contains(v, offset)),
                    DeValue::Array(items) => items.iter().any(|i| contains(i, offset)),
                    _ => false,
                }
        }
        fn walk(value: &DeValue<'_>, offset: usize, path: &mut Vec<Seg>) {
            match value {
                DeValue::Table(t) => {
                    if let Some((k, v)) = t
                        .iter()
                        .find(|(k, v)| k.span().contains(&offset) || contains(v, offset))
                    {
                        path.push(Seg::Key(k.get_ref().to_string()));
                        walk(v.get_ref(), offset, path);
                    }
                }
                DeValue::Array(items) => {
                    if let Some((i, item)) = items
                        .iter()
                        .enumerate()
                        .find(|(_, item)| contains(item, offset))
                    {
                        path.push(Seg::Index(i));
                        walk(item.get_ref(), offset, path);
                    }
                }
                _ => {}
            }
        }
        let mut path = Vec::new();
        if let Some(doc) = &self.doc {
            walk(&DeValue::Table(doc.clone()), offset, &mut path);
        }
        display_path(&path)
    }

    pub(super) fn error(
        &self,
        path: &[Seg],
        message: impl Into<String>,
        help: Option<&str>,
    ) -> ConfigError {
        let (line, column) = self
            .span_of(path)
            .map_or((0, 0), |s| self.line_col(s.start));
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            field: display_path(path),
            message: message.into(),
            help: help.map(str::to_owned),
        }
    }
}

pub(super) fn help_for_serde(message: &str) -> Option<String> {
    if message.contains("unknown field `token`") {
        return Some("tokens are never written in the config: set `token_env = \"VAR\"` and put the token in that environment variable".into());
    }
    if message.contains("unknown field") {
        return Some("check the spelling against docs/configuration.md; unknown fields are refused so a typo cannot silently disable a control".into());
    }
    if message.contains("unknown variant") {
        return Some("use one of the values listed above".into());
    }
    None
}
