//! What every test file of the sandbox starts its provider with: a sandbox served on an
//! ephemeral port, and a client that speaks to it (with its API key, when it has one).

use oncegate_sandbox::{self as sandbox, SandboxConfig};
use reqwest::StatusCode;
use serde_json::Value;

/// A sandbox served on an ephemeral port for one test.
pub struct Running {
    pub base: String,
    pub client: reqwest::Client,
    pub api_key: Option<String>,
}

impl Running {
    pub async fn start(config: SandboxConfig) -> Running {
        // reqwest is built without a default crypto provider; any test may be first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral port");
        let addr = listener.local_addr().expect("a bound address");
        let api_key = config.api_key.clone();
        tokio::spawn(sandbox::serve(listener, config));
        Running {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            api_key,
        }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    pub fn post(&self, path: &str, key: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let builder = self.request(reqwest::Method::POST, path).json(body);
        match key {
            Some(key) => builder.header("Idempotency-Key", key),
            None => builder,
        }
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .expect("the sandbox answers");
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        response.json().await.expect("a JSON body")
    }

    pub async fn effects(&self, query: &str) -> Vec<Value> {
        let body = self.get_json(&format!("/v1/effects{query}")).await;
        body["effects"]
            .as_array()
            .expect("an effects array")
            .clone()
    }

    pub async fn queue_fault(&self, fault: Value) {
        let response = self
            .client
            .post(format!("{}/_sandbox/faults", self.base))
            .json(&fault)
            .send()
            .await
            .expect("the sandbox answers");
        assert_eq!(response.status(), StatusCode::OK, "queue {fault}");
    }
}
