//! Alert webhooks: renders `gateway.alert_webhook`'s URL template and POSTs each alert
//! an outcome raised, in the background (best effort: the alert is already in the log,
//! the metrics and the audit record).

use std::time::Duration;

use oncegate_core::intent::Outcome;
use oncegate_core::template::{Part, Source, Template};
use serde_json::json;

use crate::upstream::client::secrets;

/// The webhook URL: literals as written, `${env:NAME}` from the environment, any other
/// placeholder empty.
pub fn webhook_url(template: &Template) -> String {
    let mut url = String::new();
    for part in template.parts() {
        match part {
            Part::Literal(l) => url.push_str(l),
            Part::Placeholder(Source::Env(name)) => {
                url.push_str(&std::env::var(name).unwrap_or_default());
            }
            Part::Placeholder(_) => {}
        }
    }
    url
}

/// POSTs each of `outcome`'s alerts to the webhook (none configured: nothing).
pub fn send(
    http: &reqwest::Client,
    template: Option<&Template>,
    outcome: &Outcome,
    capability: &str,
    principal: &str,
) {
    let Some(template) = template else {
        return;
    };
    if outcome.alerts.is_empty() {
        return;
    }
    let url = webhook_url(template);
    for alert in &outcome.alerts {
        let body = json!({"alert": alert, "capability": capability, "intent_key": outcome.key, "principal": principal});
        let (client, url, template) = (http.clone(), url.clone(), template.clone());
        tokio::spawn(async move {
            if let Err(e) = client
                .post(&url)
                .timeout(Duration::from_secs(5))
                .json(&body)
                .send()
                .await
            {
                // reqwest's error names the URL, which carries the receiver's secret.
                let error = secrets([&template]).text(&e.to_string());
                tracing::warn!(%error, "alert webhook failed");
            }
        });
    }
}
