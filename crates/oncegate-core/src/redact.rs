//! Keeping credentials out of text meant for people: the errors an agent, an approver,
//! the store, a log line or `check-config` shows.
//!
//! Two things may hold a credential. A URL's userinfo and query (`https://u:p@host`,
//! `?api_key=...`): [`url`] and [`urls_in`] mask them wherever a URL appears in a text
//! (a client library's error names the URL it failed on). And the values the gateway
//! substitutes from its environment into templated URLs, headers and bodies
//! (`{env.NAME}`): a [`Redactor`] knows them and masks them anywhere in a text, so a
//! header's token or a secret path segment cannot leak through an error that echoes it.
//! Hosts and paths stay: an error must still say where the call went.
//!
//! Pure: the caller reads the environment and hands the values in.

use std::fmt;

use crate::template::{Source, Template};

/// What a masked credential reads as.
pub const MASK: &str = "***";

/// Values shorter than this are never masked: no credential is that short, and masking
/// every `1` or `eu` in a message would make it unreadable.
const SHORTEST_SECRET: usize = 4;

/// `url` without what may hold a credential: its userinfo reads `***@`, each query value
/// `***` (the names stay), a fragment `#***`. Scheme, host, port and path stay. Text
/// that is no `scheme://` URL is answered as it is.
pub fn url(url: &str) -> String {
    let Some(i) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = (&url[..i], &url[i + 3..]);
    let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = format!("{scheme}://");
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(MASK);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((b, _)) => (b, true),
        None => (tail, false),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&masked_query(query));
        }
        None => out.push_str(before_fragment),
    }
    if fragment {
        out.push('#');
        out.push_str(MASK);
    }
    out
}

/// `text` with every URL in it (`scheme://...`, up to a space, a quote or a control
/// character such as a terminal colour's escape) passed
/// through [`url`]. Punctuation that ends a sentence or closes a parenthesis after a
/// URL is kept outside it, so `for url (http://h/p?k=v)` reads `(http://h/p?k=***)`.
pub fn urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let scheme_start = rest[..i]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map_or(i, |(j, _)| j);
        // A scheme starts with a letter (`1://` or a bare `://` is no URL).
        let scheme_start = rest[scheme_start..i]
            .find(|c: char| c.is_ascii_alphabetic())
            .map_or(i, |k| scheme_start + k);
        let after = &rest[i + 3..];
        let mut end = i
            + 3
            + after
                .find(|c: char| {
                    c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '`' | '<' | '>')
                })
                .unwrap_or(after.len());
        while end > i + 3 && rest[..end].ends_with([')', ']', '}', '.', ',', ';', ':', '!']) {
            end -= 1;
        }
        if scheme_start == i {
            out.push_str(&rest[..end]);
        } else {
            out.push_str(&rest[..scheme_start]);
            out.push_str(&self::url(&rest[scheme_start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The secret values a text must not show (what `{env.NAME}` placeholders were filled
/// with), and how each reads instead. [`Redactor::text`] masks them and every URL's
/// credentials. Its `Debug` never shows a value.
#[derive(Clone, Default)]
pub struct Redactor {
    /// (value, what it reads as), longest value first so a secret that contains
    /// another is masked whole.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// A redactor of the values of every `{env.NAME}` the templates read, as `lookup`
    /// finds them (the gateway's environment; an unset variable has nothing to hide).
    pub fn of_env<'t>(
        templates: impl IntoIterator<Item = &'t Template>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut redactor = Self::default();
        for template in templates {
            for source in template.sources() {
                if let Source::Env(name) = source
                    && let Some(value) = lookup(name)
                {
                    redactor.add(&value);
                }
            }
        }
        redactor
    }

    /// Masks `value` from now on. A value that is a URL keeps its scheme, host and port
    /// (where a call goes is no secret) and reads `/***` for the rest, so a base URL
    /// from the environment still says which host failed; any other value reads `***`.
    pub fn add(&mut self, value: &str) {
        if value.chars().count() < SHORTEST_SECRET {
            return;
        }
        let (shown, forms) = match ::url::Url::parse(value) {
            Ok(u) if u.has_host() && value.contains("://") => {
                let origin = match (u.host_str(), u.port()) {
                    (Some(h), Some(p)) => format!("{}://{h}:{p}", u.scheme()),
                    (Some(h), None) => format!("{}://{h}", u.scheme()),
                    _ => return,
                };
                let bare = u.username().is_empty()
                    && u.password().is_none()
                    && matches!(u.path(), "" | "/")
                    && u.query().is_none()
                    && u.fragment().is_none();
                if bare {
                    // Nothing but where the call goes: nothing to hide.
                    return;
                }
                // As written, and as a client library prints it once parsed.
                let parsed = u.as_str().to_owned();
                let forms = vec![parsed.trim_end_matches('/').to_owned(), parsed];
                (format!("{origin}/{MASK}"), forms)
            }
            _ => {
                // As written, and percent-encoded the ways a URL or a form carries it.
                let form: String =
                    ::url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
                let percent = form.replace('+', "%20");
                (MASK.to_owned(), vec![form, percent])
            }
        };
        for form in std::iter::once(value.to_owned()).chain(forms) {
            if form.chars().count() >= SHORTEST_SECRET
                && !self.secrets.iter().any(|(v, _)| *v == form)
            {
                self.secrets.push((form, shown.clone()));
            }
        }
        self.secrets
            .sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    }

    /// Adds every value `other` masks.
    pub fn extend(&mut self, other: &Redactor) {
        for (value, shown) in &other.secrets {
            if !self.secrets.iter().any(|(v, _)| v == value) {
                self.secrets.push((value.clone(), shown.clone()));
            }
        }
        self.secrets
            .sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    }

    /// `text` without the secret values and without any URL's userinfo and query
    /// values.
    pub fn text(&self, text: &str) -> String {
        urls_in(&self.values(text))
    }

    /// `text` without the secret values, and otherwise as it is: for content shown on
    /// purpose (an approver's preview of a request body, whose links are what the
    /// approver must read whole).
    pub fn values(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, shown) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), shown);
            }
        }
        out
    }

    /// Whether it knows no secret value (it still masks URLs' credentials).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secret forms)", self.secrets.len())
    }
}

/// Each `name=value` of a query as `name=***`; a part without a name as `***`.
fn masked_query(query: &str) -> String {
    query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((name, _)) if !name.is_empty() => format!("{name}={MASK}"),
            _ if part.is_empty() => String::new(),
            _ => MASK.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_where_it_goes_and_loses_its_credentials() {
        assert_eq!(
            url("http://u:pw@127.0.0.1:9/mcp?api_key=s3cret&v=2#frag"),
            "http://***@127.0.0.1:9/mcp?api_key=***&v=***#***"
        );
        assert_eq!(
            url("postgres://postgres@db:5432/test"),
            "postgres://***@db:5432/test"
        );
        assert_eq!(url("https://h/p?tok3n"), "https://h/p?***");
        assert_eq!(url("https://h/p"), "https://h/p");
        assert_eq!(url("sqlite://oncegate.db"), "sqlite://oncegate.db");
        assert_eq!(url("not a url"), "not a url");
    }

    #[test]
    fn every_url_in_a_text_is_masked_and_the_text_around_it_stays() {
        assert_eq!(
            urls_in("error sending request for url (http://u:p@h:1/mcp?k=v): refused."),
            "error sending request for url (http://***@h:1/mcp?k=***): refused."
        );
        assert_eq!(
            urls_in("GET \"https://h/x?a=1\" and ws://h2/?b=2, then 3://x and ://y"),
            "GET \"https://h/x?a=***\" and ws://h2/?b=***, then 3://x and ://y"
        );
        assert_eq!(urls_in("é http://h/?k=ü)"), "é http://h/?k=***)");
        // A secret with a parenthesis in it is masked whole.
        assert_eq!(urls_in("(http://h/?k=a)b)"), "(http://h/?k=***)");
    }

    #[test]
    fn environment_values_are_masked_in_every_form_a_url_or_a_header_carries() {
        let templates = [
            Template::parse("{env.BASE}/charges?key={env.KEY}").unwrap(),
            Template::parse("Bearer {env.TOKEN}").unwrap(),
            Template::parse("{env.HOOK}").unwrap(),
            Template::parse("{env.SHORT}").unwrap(),
        ];
        let env = |name: &str| {
            Some(
                match name {
                    "BASE" => "http://127.0.0.1:9",
                    "KEY" => "k3y value/ü",
                    "TOKEN" => "tok_abcdef",
                    "HOOK" => "https://hooks.example.com/services/T1/B2/x9",
                    _ => "eu",
                }
                .to_owned(),
            )
        };
        let r = Redactor::of_env(&templates, env);
        assert_eq!(
            r.text("url (http://127.0.0.1:9/charges?key=k3y%20value%2F%C3%BC) said tok_abcdef"),
            "url (http://127.0.0.1:9/charges?key=***) said ***"
        );
        assert_eq!(r.text("a k3y value/ü b k3y+value%2F%C3%BC"), "a *** b ***");
        assert_eq!(
            r.text("POST https://hooks.example.com/services/T1/B2/x9: refused"),
            "POST https://hooks.example.com/***: refused"
        );
        // Too short to be a credential, and a bare origin, are left alone.
        assert_eq!(
            r.text("eu at http://127.0.0.1:9"),
            "eu at http://127.0.0.1:9"
        );
        assert!(!format!("{r:?}").contains("tok_abcdef"));
    }
}
