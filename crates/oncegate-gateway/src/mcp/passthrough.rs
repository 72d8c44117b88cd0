//! The read-only rest of a fronted MCP server: its resources (list, templates, read), its
//! prompts (list, get) and completions for them, relayed to agents so that a fronted
//! server is not half hidden. None of these has an effect (the MCP specification makes
//! them reads), so nothing is claimed or recorded; each is asked of a server on a
//! connection of its own, within the server's timeout.
//!
//! - Only servers whose `undeclared` policy lets anything unnamed through (`read`,
//!   `require_approval`) are relayed: under `refuse` nothing the registry did not name
//!   reaches the server.
//! - Each `get`, `read` and `complete` passes [`Gate::admit_fronted_read`]: kill switches
//!   (`agent:<principal>`, `capability:<prompt name or resource URI>`) and the
//!   principal's read rate cap.
//! - Prompts are named as the server's tools are (`<alias>_<prompt>`, or their own names
//!   on the one server with `prefix = false`), so a name has one owner. Resource URIs are
//!   the servers' own; a read goes only to the server that lists the URI (or a template
//!   matching it), never to one that did not offer it.
//!
//! [`Gate::admit_fronted_read`]: oncegate_engine::Gate::admit_fronted_read

use futures::future::join_all;
use oncegate_core::config::{McpServer, Undeclared};
use rmcp::model::{
    CompleteRequestParams, CompleteResult, ErrorData as McpError, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Reference, Resource, ResourceTemplate,
};

use crate::state::{AppState, Principal};
use crate::upstream::{mcp, server_request};

/// Every relayed server's prompts, under the names agents call them by. A server that
/// cannot be read is left out (and logged).
pub async fn list_prompts(state: &AppState) -> ListPromptsResult {
    let lists = join_all(servers(state).map(|server| async move {
        let listed = ask(state, server, async |p| p.list_all_prompts().await).await;
        (server, listed.unwrap_or_default())
    }))
    .await;
    let mut prompts: Vec<Prompt> = Vec::new();
    for (server, listed) in lists {
        for mut prompt in listed {
            let name = offered(server, &prompt.name);
            if prompts.iter().all(|p| p.name != name) {
                prompt.name = name;
                prompts.push(prompt);
            }
        }
    }
    ListPromptsResult {
        prompts,
        ..Default::default()
    }
}

/// One prompt, by the name agents see, from the server that owns that name.
pub async fn get_prompt(
    state: &AppState,
    principal: &Principal,
    mut params: GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    let (server, own) = owner(state, &params.name)
        .ok_or_else(|| McpError::invalid_params(format!("no prompt {}", params.name), None))?;
    admit(state, principal, &params.name).await?;
    params.name = own;
    ask(state, server, async move |p| p.get_prompt(params).await).await
}

/// Every relayed server's resources, URIs as the servers give them.
pub async fn list_resources(state: &AppState) -> ListResourcesResult {
    ListResourcesResult {
        resources: resources(state)
            .await
            .into_iter()
            .flat_map(|(_, r)| r)
            .collect(),
        ..Default::default()
    }
}

/// Every relayed server's resource templates.
pub async fn list_resource_templates(state: &AppState) -> ListResourceTemplatesResult {
    ListResourceTemplatesResult {
        resource_templates: templates(state)
            .await
            .into_iter()
            .flat_map(|(_, t)| t)
            .collect(),
        ..Default::default()
    }
}

/// One resource, from the server that lists its URI (or a template matching it).
pub async fn read_resource(
    state: &AppState,
    principal: &Principal,
    params: ReadResourceRequestParams,
) -> Result<ReadResourceResult, McpError> {
    let uri = params.uri.clone();
    let listed = resources(state).await;
    let mut server = listed
        .iter()
        .find(|(_, rs)| rs.iter().any(|r| r.uri == uri))
        .map(|(s, _)| *s);
    if server.is_none() {
        let templates = templates(state).await;
        server = templates
            .iter()
            .find(|(_, ts)| ts.iter().any(|t| template_matches(&t.uri_template, &uri)))
            .map(|(s, _)| *s);
    }
    let server =
        server.ok_or_else(|| McpError::resource_not_found(format!("no resource {uri}"), None))?;
    admit(state, principal, &uri).await?;
    ask(state, server, async move |p| p.read_resource(params).await).await
}

/// Completions for a prompt's or a resource template's argument, from the server that
/// offers it.
pub async fn complete(
    state: &AppState,
    principal: &Principal,
    mut params: CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let (server, asked) = match &mut params.r#ref {
        Reference::Prompt(p) => {
            let (server, own) = owner(state, &p.name)
                .ok_or_else(|| McpError::invalid_params(format!("no prompt {}", p.name), None))?;
            let asked = std::mem::replace(&mut p.name, own);
            (server, asked)
        }
        Reference::Resource(r) => {
            let uri = r.uri.clone();
            let templates = templates(state).await;
            let server = templates
                .iter()
                .find(|(_, ts)| ts.iter().any(|t| t.uri_template == uri))
                .map(|(s, _)| *s)
                .ok_or_else(|| {
                    McpError::invalid_params(format!("no resource template {uri}"), None)
                })?;
            (server, uri)
        }
        _ => return Err(McpError::invalid_params("nothing to complete", None)),
    };
    admit(state, principal, &asked).await?;
    ask(state, server, async move |p| p.complete(params).await).await
}

/// Whether any server is relayed (the surface then offers resources and prompts).
pub fn any(state: &AppState) -> bool {
    servers(state).next().is_some()
}

fn servers(state: &AppState) -> impl Iterator<Item = &McpServer> {
    state
        .gate()
        .registry()
        .mcp_servers
        .iter()
        .filter(|s| s.undeclared != Undeclared::Refuse)
}

/// The name agents see for `server`'s prompt `name`.
fn offered(server: &McpServer, name: &str) -> String {
    if server.prefix {
        format!("{}_{name}", server.alias)
    } else {
        name.to_owned()
    }
}

/// The server that owns the offered name `name`, and the name it knows it by: a prefixed
/// server by its prefix, else the server under its own names.
fn owner<'a>(state: &'a AppState, name: &str) -> Option<(&'a McpServer, String)> {
    let prefixed = servers(state).filter(|s| s.prefix).find_map(|s| {
        let own = name.strip_prefix(&s.alias)?.strip_prefix('_')?;
        Some((s, own.to_owned()))
    });
    prefixed.or_else(|| {
        servers(state)
            .find(|s| !s.prefix)
            .map(|s| (s, name.to_owned()))
    })
}

async fn resources(state: &AppState) -> Vec<(&McpServer, Vec<Resource>)> {
    join_all(servers(state).map(|server| async move {
        let listed = ask(state, server, async |p| p.list_all_resources().await).await;
        (server, listed.unwrap_or_default())
    }))
    .await
}

async fn templates(state: &AppState) -> Vec<(&McpServer, Vec<ResourceTemplate>)> {
    join_all(servers(state).map(|server| async move {
        let listed = ask(state, server, async |p| {
            p.list_all_resource_templates().await
        })
        .await;
        (server, listed.unwrap_or_default())
    }))
    .await
}

async fn admit(state: &AppState, principal: &Principal, name: &str) -> Result<(), McpError> {
    state
        .gate()
        .admit_fronted_read(&principal.name, name)
        .await
        .map_err(|e| McpError::invalid_request(e.to_string(), None))
}

async fn ask<T>(
    state: &AppState,
    server: &McpServer,
    question: impl AsyncFnOnce(&rmcp::Peer<rmcp::RoleClient>) -> Result<T, rmcp::ServiceError>,
) -> Result<T, McpError> {
    let request = server_request(server).map_err(|e| McpError::internal_error(e, None))?;
    let answer = mcp::with_peer(state.http(), &request, question).await;
    if let Err(e) = &answer {
        tracing::debug!(server = %server.alias, error = %e.message, "a fronted server's read failed");
    }
    answer
}

/// Whether `uri` is one of the URIs an RFC 6570 template names (level 1 and 2: `{var}`
/// is one or more characters other than `/`, `?` and `#`; `{+var}` and `{#var}` any).
fn template_matches(template: &str, uri: &str) -> bool {
    enum Part<'a> {
        Literal(&'a str),
        Var { reserved: bool },
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        parts.push(Part::Literal(&rest[..open]));
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        let expr = &rest[open + 1..open + close];
        parts.push(Part::Var {
            reserved: expr.starts_with('+') || expr.starts_with('#'),
        });
        rest = &rest[open + close + 1..];
    }
    parts.push(Part::Literal(rest));
    fn matches(parts: &[Part<'_>], uri: &str) -> bool {
        match parts.split_first() {
            None => uri.is_empty(),
            Some((Part::Literal(l), more)) => uri
                .strip_prefix(l)
                .is_some_and(|after| matches(more, after)),
            Some((Part::Var { reserved }, more)) => {
                let stop = |c: char| !reserved && matches!(c, '/' | '?' | '#');
                let longest = uri.find(stop).unwrap_or(uri.len());
                (1..=longest)
                    .rev()
                    .filter(|&n| uri.is_char_boundary(n))
                    .any(|n| matches(more, &uri[n..]))
            }
        }
    }
    matches(&parts, uri)
}

#[cfg(test)]
mod tests {
    use super::template_matches;

    #[test]
    fn templates_match_the_uris_they_name_and_no_others() {
        let t = "test://template/{id}/data";
        assert!(template_matches(t, "test://template/123/data"));
        assert!(!template_matches(t, "test://template//data"));
        assert!(!template_matches(t, "test://template/1/2/data"));
        assert!(!template_matches(t, "test://template/123/data/more"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches(
            "db://{schema}/{table}",
            "db://public/users"
        ));
        assert!(!template_matches("db://{schema}/{table}", "db://public"));
        assert!(template_matches("static://x", "static://x"));
        assert!(!template_matches("bad://{x", "bad://{x"));
    }
}
