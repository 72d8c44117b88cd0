//! HTTP/JSON upstreams: an effect's request sent and its answer classified (only proof
//! that no byte left makes an attempt `not_applied`; a 429 is the provider's explicit
//! "not done"; anything that may have reached the provider is `unknown`; a 4xx is a
//! definite failure), and the HTTP reconciliation read.

use oncegate_core::config::{Reconcile, Upstream};
use oncegate_core::limits::bound_answer;
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::IntentHandle;
use serde_json::Value;

use super::answer::{judge, pointer_string, read_body};
use super::client::reqwest_error_text;
use super::executor::UpstreamExecutor;
use super::render::{RenderError, Scope, check_path, render_http};

impl UpstreamExecutor {
    /// An HTTP effect's request for `intent`, rendered, with the trace context headers.
    pub(super) fn request(
        &self,
        up: &Upstream,
        intent: &IntentHandle,
    ) -> Result<reqwest::RequestBuilder, RenderError> {
        let rendered = render_http(up, intent)?;
        let mut req = self
            .client
            .request(rendered.method, rendered.url)
            .timeout(up.timeout.unsigned_abs());
        for (name, value) in &rendered.headers {
            req = req.header(name, value);
        }
        for (name, value) in crate::trace::outgoing() {
            req = req.header(name, value);
        }
        if let Some(body) = &rendered.body {
            req = req.json(body);
        }
        Ok(req)
    }

    /// Sends an HTTP effect's rendered request and classifies the answer: a 2xx is
    /// applied, a 429 not done, a 4xx refused, anything that may have reached the
    /// provider unknown.
    pub(super) async fn send_http(
        &self,
        up: &Upstream,
        req: reqwest::RequestBuilder,
    ) -> EffectResult {
        match req.send().await {
            Err(e) => classify_error(&e),
            Ok(response) => {
                let status = response.status();
                match read_body(response, &self.limits).await {
                    Err(e) => classify_error(&e),
                    Ok(body) if status.is_success() => EffectResult::Applied {
                        effect_ref: body
                            .full
                            .as_ref()
                            .and_then(|full| pointer_string(full, up.effect_ref.as_deref())),
                        result: body.stored,
                    },
                    Ok(_) if status.as_u16() == 429 => EffectResult::NotSent {
                        message: "the upstream rate-limited the call (429): nothing was done"
                            .into(),
                    },
                    // "Still processing this key", "locked", "too early", "request timeout":
                    // the provider may yet do it, so these are unknown, not refusals.
                    Ok(_) if matches!(status.as_u16(), 408 | 409 | 423 | 425) => {
                        EffectResult::Unknown {
                            message: format!(
                                "the upstream answered {status}: it may still take effect"
                            ),
                        }
                    }
                    Ok(_) if status.is_redirection() => EffectResult::Unknown {
                        message: format!(
                            "the upstream redirected ({status}); redirects are not followed for effects"
                        ),
                    },
                    Ok(body) if status.is_client_error() => EffectResult::Failed {
                        message: format!("the upstream refused the call ({status})"),
                        result: body.stored,
                    },
                    Ok(_) => EffectResult::Unknown {
                        message: format!("the upstream answered {status}"),
                    },
                }
            }
        }
    }

    pub(super) async fn reconcile_read(
        &self,
        rec: &Reconcile,
        intent: &IntentHandle,
    ) -> Result<ReconcileResult, String> {
        let scope = Scope { intent };
        let url = scope.url(&rec.url).map_err(|e| e.to_string())?;
        check_path(&url).map_err(|e| e.to_string())?;
        let method =
            reqwest::Method::from_bytes(rec.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = self
            .client
            .request(method, url)
            .timeout(rec.timeout.unsigned_abs());
        for (name, value) in &rec.headers {
            req = req.header(name, scope.text(value).map_err(|e| e.to_string())?);
        }
        if let Some(up) = &self.cap.upstream {
            // The read authenticates like the write (same provider credentials).
            for (name, value) in &up.headers {
                if !rec.headers.contains_key(name) {
                    req = req.header(name, scope.text(value).map_err(|e| e.to_string())?);
                }
            }
        }
        for (name, value) in crate::trace::outgoing() {
            req = req.header(name, value);
        }
        let response = req.send().await.map_err(|e| {
            format!(
                "reconciliation read failed: {}",
                reqwest_error_text(&e).text
            )
        })?;
        let status = response.status();
        let body = read_body(response, &self.limits).await.map_err(|e| {
            format!(
                "reconciliation read failed: {}",
                reqwest_error_text(&e).text
            )
        })?;
        if status.as_u16() == 404 && rec.found.is_none() {
            return Ok(ReconcileResult::NotFound);
        }
        if !status.is_success() {
            return Err(format!("reconciliation read answered {status}"));
        }
        let Some(full) = body.full else {
            return Err(format!(
                "the reconciliation answer could not be judged: {}",
                body.stored
                    .get(oncegate_core::limits::TRUNCATED_KEY)
                    .and_then(|t| t.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("it is not JSON")
            ));
        };
        Ok(match judge(rec, full)? {
            ReconcileResult::Found { effect_ref, result } => ReconcileResult::Found {
                effect_ref,
                result: bound_answer(result, &self.limits),
            },
            other => other,
        })
    }
}

/// Classifies a transport error: only a failure to connect proves nothing was sent.
fn classify_error(e: &reqwest::Error) -> EffectResult {
    // Never echo the URL: it may carry credentials from the gateway's environment.
    let e = reqwest_error_text(e);
    if e.connect || e.builder {
        EffectResult::NotSent {
            message: format!("nothing was sent to the upstream: {}", e.text),
        }
    } else if e.timeout {
        EffectResult::Unknown {
            message: "the upstream did not answer before the timeout".into(),
        }
    } else {
        EffectResult::Unknown {
            message: format!(
                "the connection failed after the request was sent: {}",
                e.text
            ),
        }
    }
}
