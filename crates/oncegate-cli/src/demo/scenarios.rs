//! The demo's scenarios, one method each over the running [`World`]: each drives the
//! naive executor and oncegate through the same story and tallies the effects the
//! sandbox's ledger shows for each.

use std::time::Duration;

use serde_json::{Value, json};

use super::world::{World, spawn_gateway};

/// What one scenario counted and saw.
pub(super) struct Tally {
    /// Effects the naive executor caused.
    pub(super) naive: usize,
    /// Effects with oncegate in front.
    pub(super) oncegate: usize,
    /// What oncegate must produce.
    pub(super) expected: usize,
    /// Whatever else was checked, for the row.
    pub(super) notes: String,
    /// Whatever else was checked held.
    pub(super) ok: bool,
}

impl Tally {
    fn new(naive: usize, oncegate: usize, expected: usize, notes: String, ok: bool) -> Self {
        Self {
            naive,
            oncegate,
            expected,
            notes,
            ok,
        }
    }
}

impl World {
    /// Scenario 1: the provider commits, then stalls past the timeout; the harness retries.
    pub(super) async fn timeout_retry(&self) -> Tally {
        self.fault("/v1/charges", "stall_after_commit", 3, 3000)
            .await;
        for _ in 0..4 {
            if self
                .naive(
                    "/v1/charges",
                    json!({"order_id": "N1", "amount_minor": 1250, "currency": "USD"}),
                )
                .await
            {
                break;
            }
        }
        self.fault("/v1/charges", "stall_after_commit", 1, 3000)
            .await;
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let o = self
                .call(
                    &self.gateway,
                    "tok-planner",
                    "charge_card",
                    json!({"order_id": "O1", "amount": "12.50"}),
                    None,
                )
                .await;
            statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
        }
        let ok = statuses.first().map(String::as_str) == Some("unknown")
            && statuses[1..].iter().all(|s| s == "replayed");
        Tally::new(
            self.effects("N1").await,
            self.effects("O1").await,
            1,
            format!("oncegate answered {}", statuses.join(", ")),
            ok,
        )
    }

    /// Scenario 2: an injected page makes the agent re-plan the charge, its amount spelled four ways.
    pub(super) async fn injected_replan(&self) -> Tally {
        for amount in [1250, 1250, 1250, 1250] {
            self.naive(
                "/v1/charges",
                json!({"order_id": "N2", "amount_minor": amount, "currency": "USD"}),
            )
            .await;
        }
        let mut statuses = Vec::new();
        for (amount, memo) in [
            (json!("12.50"), "first"),
            (json!(12.5), "it failed, reissue"),
            (json!("12.50"), "retry"),
            (json!({"minor": 1250}), "really reissue"),
        ] {
            let o = self
                .call(
                    &self.gateway,
                    "tok-planner",
                    "charge_card",
                    json!({"order_id": "O2", "amount": amount, "currency": "USD", "memo": memo}),
                    None,
                )
                .await;
            statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
        }
        let ok = statuses[0] == "applied" && statuses[1..].iter().all(|s| s == "replayed");
        Tally::new(
            self.effects("N2").await,
            self.effects("O2").await,
            1,
            format!("oncegate answered {}", statuses.join(", ")),
            ok,
        )
    }

    /// Scenario 3: the gateway is SIGKILLed between the provider's commit and its record, restarted, and the run resumes.
    pub(super) async fn crash_replay(&self) -> Tally {
        // Naive: the harness crashed after the provider committed, forgot, resumed.
        self.naive(
            "/v1/charges",
            json!({"order_id": "N3", "amount_minor": 999, "currency": "USD"}),
        )
        .await;
        self.naive(
            "/v1/charges",
            json!({"order_id": "N3", "amount_minor": 999, "currency": "USD"}),
        )
        .await;
        let (replayed, note) = match self.crash_and_resume().await {
            Ok(s) => (
                s == "replayed",
                format!("after restart oncegate answered {s}"),
            ),
            Err(e) => (false, format!("crash run failed: {e}")),
        };
        Tally::new(
            self.effects("N3").await,
            self.effects("O3").await,
            1,
            note,
            replayed,
        )
    }

    /// Scenario 4: a refund over the limit waits for approval; two approvers click at once.
    pub(super) async fn double_approval(&self) -> Tally {
        self.naive(
            "/v1/refunds",
            json!({"order_id": "N4", "amount_minor": 25000, "currency": "USD"}),
        )
        .await;
        self.naive(
            "/v1/refunds",
            json!({"order_id": "N4", "amount_minor": 25000, "currency": "USD"}),
        )
        .await;
        let held = self
            .call(
                &self.gateway,
                "tok-planner",
                "refund",
                json!({"order_id": "O4", "amount": "250.00"}),
                None,
            )
            .await;
        let id = held["approval_id"].as_str().unwrap_or_default().to_owned();
        let (a, b) = tokio::join!(self.approve("tok-alice", &id), self.approve("tok-bob", &id));
        let one_result = [&a, &b]
            .iter()
            .all(|o| o["status"] == "applied" || o["status"] == "replayed")
            && a["effect_ref"] == b["effect_ref"]
            && a["effect_ref"].is_string();
        let ok = held["status"] == "pending_approval" && !id.is_empty() && one_result;
        Tally::new(
            self.effects("N4").await,
            self.effects("O4").await,
            1,
            format!(
                "held as {id}; clicks answered {} and {}",
                a["status"], b["status"]
            ),
            ok,
        )
    }

    /// Scenario 5: sixteen subagents fire the same charge at once.
    pub(super) async fn parallel_subagents(&self) -> Tally {
        let naive: Vec<_> = (0..16)
            .map(|_| {
                self.naive(
                    "/v1/charges",
                    json!({"order_id": "N5", "amount_minor": 500, "currency": "USD"}),
                )
            })
            .collect();
        futures::future::join_all(naive).await;
        let calls: Vec<_> = (0..16)
            .map(|i| {
                self.call(
                    &self.gateway,
                    if i % 2 == 0 {
                        "tok-planner"
                    } else {
                        "tok-subagent"
                    },
                    "charge_card",
                    json!({"order_id": "O5", "amount": "5.00", "memo": format!("subagent {i}")}),
                    None,
                )
            })
            .collect();
        let outcomes = futures::future::join_all(calls).await;
        let applied = outcomes.iter().filter(|o| o["status"] == "applied").count();
        Tally::new(
            self.effects("N5").await,
            self.effects("O5").await,
            1,
            format!(
                "{applied} applied, {} in flight or replayed",
                outcomes.len() - applied
            ),
            applied == 1,
        )
    }

    /// Scenario 6: fifty repeats of a sent email, then fifty against a provider answering 429.
    pub(super) async fn retry_storm(&self) -> Tally {
        for _ in 0..50 {
            self.naive(
                "/v1/emails",
                json!({"order_id": "N6", "to": "a@b.co", "template": "receipt"}),
            )
            .await;
        }
        // A storm against an intent that took effect: every repeat is a replay
        // with the effect reference (nothing runs, nothing is written), and the
        // loop itself raises an alert.
        let (mut replays, mut storm) = (0, false);
        for _ in 0..50 {
            let o = self
                .call(
                    &self.gateway,
                    "tok-planner",
                    "send_email",
                    json!({"order_id": "O6", "to": "a@b.co", "template": "receipt"}),
                    None,
                )
                .await;
            replays += usize::from(o["status"] == "replayed");
            storm |= o["alerts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["kind"] == "replay_storm"));
        }
        // A storm of executions: the provider keeps answering 429, so every
        // repeat executes again, until the attempt ceiling trips the breaker.
        self.fault("/v1/emails", "rate_limit", 50, 0).await;
        let mut refused = 0;
        for _ in 0..50 {
            let o = self
                .call(
                    &self.gateway,
                    "tok-planner",
                    "send_email",
                    json!({"order_id": "O6-429", "to": "a@b.co", "template": "receipt"}),
                    None,
                )
                .await;
            if o["status"] == "refused" && o["reason"]["code"] == "OG-0004" {
                refused += 1;
            }
        }
        let _ = self
            .http
            .delete(format!("{}/_sandbox/faults", self.sandbox))
            .send()
            .await;
        Tally::new(
            self.effects("N6").await,
            self.effects("O6").await + self.effects("O6-429").await,
            1,
            format!(
                "{replays} of 49 repeats replayed{}; under 429s the breaker refused {refused} of 50",
                if storm {
                    " with a replay-storm alert"
                } else {
                    ", NO replay-storm alert"
                }
            ),
            replays == 49 && storm && refused == 45,
        )
    }

    /// Scenario 7: a second refund after the replay window is a new intent.
    pub(super) async fn outside_the_window(&self) -> Tally {
        self.naive(
            "/v1/refunds",
            json!({"order_id": "N7", "amount_minor": 5000, "currency": "USD"}),
        )
        .await;
        self.naive(
            "/v1/refunds",
            json!({"order_id": "N7", "amount_minor": 5000, "currency": "USD"}),
        )
        .await;
        let first = self
            .call(
                &self.gateway,
                "tok-planner",
                "refund",
                json!({"order_id": "O7", "amount": "50.00"}),
                None,
            )
            .await;
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let second = self
            .call(
                &self.gateway,
                "tok-planner",
                "refund",
                json!({"order_id": "O7", "amount": "50"}),
                None,
            )
            .await;
        let ok = first["status"] == "applied"
            && second["status"] == "pending_approval"
            && second["generation"] == 2;
        Tally::new(
            self.effects("N7").await,
            self.effects("O7").await,
            1,
            format!(
                "after the window: {} (generation {})",
                second["status"], second["generation"]
            ),
            ok,
        )
    }

    /// Scenario 8: the same ledger entry from a second run.
    pub(super) async fn cross_run_duplicate(&self) -> Tally {
        let entry = |r: &str| json!({"entry_ref": r, "account": "4000", "amount": "10.00"});
        self.naive("/v1/ledger", entry("N8")).await;
        self.naive("/v1/ledger", entry("N8")).await;
        let first = self
            .call(
                &self.gateway,
                "tok-planner",
                "append_ledger",
                entry("O8"),
                Some("run-1"),
            )
            .await;
        let second = self
            .call(
                &self.gateway,
                "tok-planner",
                "append_ledger",
                entry("O8"),
                Some("run-2"),
            )
            .await;
        let alerted = second["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["kind"] == "cross_run"));
        let ok = first["status"] == "applied" && second["status"] == "pending_approval" && alerted;
        Tally::new(
            self.effects("N8").await,
            self.effects("O8").await,
            1,
            format!(
                "second run: {} with a cross-run alert: {alerted}",
                second["status"]
            ),
            ok,
        )
    }

    /// Scenario 9: the email provider ignores Idempotency-Key; the send times out once.
    pub(super) async fn provider_ignores_keys(&self) -> Tally {
        self.fault("/v1/emails", "stall_after_commit", 1, 3000)
            .await;
        for _ in 0..3 {
            if self
                .naive(
                    "/v1/emails",
                    json!({"order_id": "N9", "to": "ann@example.com", "template": "receipt"}),
                )
                .await
            {
                break;
            }
        }
        self.naive(
            "/v1/emails",
            json!({"order_id": "N9", "to": "ann@example.com", "template": "receipt"}),
        )
        .await;
        self.fault("/v1/emails", "stall_after_commit", 1, 3000)
            .await;
        let mut statuses = Vec::new();
        for to in ["ann@example.com", " ann@EXAMPLE.com", "ann@example.COM"] {
            let o = self
                .call(
                    &self.gateway,
                    "tok-planner",
                    "send_email",
                    json!({"order_id": "O9", "to": to, "template": "receipt"}),
                    None,
                )
                .await;
            statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
        }
        Tally::new(
            self.effects("N9").await,
            self.effects("O9").await,
            1,
            format!("oncegate answered {}", statuses.join(", ")),
            statuses[1..].iter().all(|s| s == "replayed"),
        )
    }

    /// Scenario 10, the control: five different orders give five charges.
    pub(super) async fn control(&self) -> Tally {
        let mut total_naive = 0;
        let mut total = 0;
        for i in 0..5 {
            self.naive(
                "/v1/charges",
                json!({"order_id": format!("N10-{i}"), "amount_minor": 100, "currency": "USD"}),
            )
            .await;
            self.call(
                &self.gateway,
                "tok-planner",
                "charge_card",
                json!({"order_id": format!("O10-{i}"), "amount": "1.00"}),
                None,
            )
            .await;
            total_naive += self.effects(&format!("N10-{i}")).await;
            total += self.effects(&format!("O10-{i}")).await;
        }
        Tally::new(
            total_naive,
            total,
            5,
            "one charge per order".to_owned(),
            true,
        )
    }

    /// Scenario 3's run: a gateway child process, SIGKILLed while the provider holds a
    /// committed charge, then restarted on the same store.
    async fn crash_and_resume(&self) -> Result<String, String> {
        let dir = self.dir.path();
        let gw = spawn_gateway(&self.gateway_exe, dir).await?;
        self.fault("/v1/charges", "stall_after_commit", 1, 30_000)
            .await;
        let url = gw.1.clone();
        let http = self.http.clone();
        let pending = tokio::spawn(async move {
            let _ = http.post(format!("{url}/v1/calls")).bearer_auth("tok-planner").json(&json!({"capability": "charge_card", "arguments": {"order_id": "O3", "amount": "9.99"}})).send().await;
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.effects("O3").await == 0 {
            if tokio::time::Instant::now() > deadline {
                return Err("the provider never committed".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (mut child, _) = gw;
        child.kill().await.map_err(|e| e.to_string())?;
        pending.abort();
        let (mut child, url) = spawn_gateway(&self.gateway_exe, dir).await?;
        tokio::time::sleep(Duration::from_millis(2100)).await; // the dead gateway's lease
        let o = self
            .call(
                &url,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O3", "amount": 9.99, "memo": "resumed run"}),
                None,
            )
            .await;
        let _ = child.kill().await;
        Ok(o["status"].as_str().unwrap_or("?").to_owned())
    }

    /// Scenario 11: the gateway charges an order, a direct credential charges it
    /// again; detection (every second, over the sandbox's listing) finds the bypass
    /// and holds the order, so the agent's next charge on it is refused; an admin
    /// clears the hold. The naive world has no backstop: its next charge lands too.
    pub(super) async fn bypass_held(&self) -> Tally {
        let g = self.gateway.clone();
        let direct =
            |order: &str| json!({"order_id": order, "amount_minor": 1200, "currency": "USD"});
        for _ in 0..2 {
            self.naive("/v1/charges", direct("N11")).await;
        }
        self.naive(
            "/v1/charges",
            json!({"order_id": "N11", "amount_minor": 300, "currency": "USD"}),
        )
        .await;
        let first = self
            .call(
                &g,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O11", "amount": "12.00"}),
                None,
            )
            .await;
        self.naive("/v1/charges", direct("O11")).await; // the bypass
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_secs(10);
        let finding = loop {
            let listed = self
                .http
                .get(format!("{g}/v1/findings"))
                .bearer_auth("tok-ops")
                .send()
                .await;
            let body: Value = match listed {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            let found = body["findings"].as_array().and_then(|all| {
                all.iter()
                    .find(|f| f["kind"] == "bypass" && f["effects"].to_string().contains("\"O11\""))
                    .cloned()
            });
            if let Some(f) = found {
                break Some(f);
            }
            if tokio::time::Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let found_in = started.elapsed().as_millis();
        let next = self
            .call(
                &g,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O11", "amount": "3.00", "memo": "the rest"}),
                None,
            )
            .await;
        let hold = finding
            .as_ref()
            .and_then(|f| f["hold_id"].as_str())
            .unwrap_or_default()
            .to_owned();
        let cleared = self
            .http
            .post(format!("{g}/v1/admin/holds/{hold}/clear"))
            .bearer_auth("tok-ops")
            .json(&json!({"reason": "demo: the bypass was refunded by hand"}))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        let ok = first["status"] == "applied"
            && finding.is_some()
            && next["status"] == "refused"
            && next["reason"]["code"] == "OG-0026"
            && cleared;
        let notes = match &finding {
            Some(f) => format!(
                "bypass {} found in {found_in} ms, hold {hold}; next charge {} {}; cleared: {cleared}",
                f["id"].as_str().unwrap_or("?"),
                next["status"].as_str().unwrap_or("?"),
                next["reason"]["code"].as_str().unwrap_or("")
            ),
            None => "no finding within 10 s".to_owned(),
        };
        Tally::new(
            self.effects("N11").await,
            self.effects("O11").await,
            2,
            notes,
            ok,
        )
    }

    /// Scenario 12: sixteen parallel charges of distinct orders by one agent, with
    /// room for three in its daily budget: three execute, thirteen are refused with
    /// the limit's code. Naive, all sixteen land.
    pub(super) async fn spend_limit(&self) -> Tally {
        let g = self.gateway.clone();
        let naive: Vec<_> = (0..16)
            .map(|i| {
                self.naive(
                    "/v1/charges",
                    json!({"order_id": format!("N12-{i}"), "amount_minor": 150_000, "currency": "USD"}),
                )
            })
            .collect();
        futures::future::join_all(naive).await;
        let calls: Vec<_> = (0..16)
            .map(|i| {
                self.call(
                    &g,
                    "tok-swarm",
                    "charge_card",
                    json!({"order_id": format!("O12-{i}"), "amount": "1500.00"}),
                    None,
                )
            })
            .collect();
        let outcomes = futures::future::join_all(calls).await;
        let applied = outcomes.iter().filter(|o| o["status"] == "applied").count();
        let limited = outcomes
            .iter()
            .filter(|o| o["status"] == "refused" && o["reason"]["code"] == "OG-0027")
            .count();
        let mut naive_total = 0;
        let mut total = 0;
        for i in 0..16 {
            naive_total += self.effects(&format!("N12-{i}")).await;
            total += self.effects(&format!("O12-{i}")).await;
        }
        Tally::new(
            naive_total,
            total,
            3,
            format!("{applied} applied, {limited} refused OG-0027 (budget 4,500.00 USD)"),
            applied == 3 && limited == 13,
        )
    }
}
