//! Guessing is throttled: `oncegate serve` with `auth_failures_per_minute = 5` is sent
//! wrong bearer tokens and wrong console sign-ins from one address, each on a new
//! connection. Past five, that address's new connections are refused 429 `OG-0057`
//! without their token being checked, while an agent whose pooled connection already
//! authenticated, and a caller from another address, go on as before. The log names
//! the address, never a token; the metric counts what was refused.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Setup, spawn_logged};

/// Every guess contains this, so one search finds any of them in the log.
const GUESS: &str = "guess-7c1f";

fn client_from(ip: [u8; 4], pooled: bool) -> reqwest::blocking::Client {
    oncegate_gateway::server::install_crypto();
    let mut b = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .local_address(IpAddr::V4(Ipv4Addr::from(ip)));
    if !pooled {
        b = b.pool_max_idle_per_host(0);
    }
    b.build().unwrap()
}

fn intents(c: &reqwest::blocking::Client, gw: &str, token: &str) -> (u16, Value) {
    let r = c
        .get(format!("{gw}/v1/intents?limit=1"))
        .bearer_auth(token)
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// One console sign-in with `token`, as a browser sends it: the form's one-time value
/// and its cookie, then the POST. Answers the POST's status.
fn sign_in(c: &reqwest::blocking::Client, gw: &str, token: &str) -> u16 {
    let form = c.get(format!("{gw}/console/sign-in")).send().unwrap();
    let cookie = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("oncegate_sign_in="))
        .and_then(|v| v.split(';').next())
        .expect("the sign-in form sets its cookie")
        .to_owned();
    let html = form.text().unwrap();
    let value = html
        .split("name=\"_sign_in\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form carries its one-time value")
        .to_owned();
    c.post(format!("{gw}/console/sign-in"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("_sign_in={value}&token={token}"))
        .send()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn failed_authentications_are_throttled_per_address_without_slowing_a_proven_connection() {
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "listen = \"127.0.0.1:7878\"",
            "listen = \"127.0.0.1:7878\"\nauth_failures_per_minute = 5",
        )
    });
    let (gw, log) = spawn_logged(setup.gateway_command(&[], "1h"));
    let gw_url = gw.url.clone();

    // An approver's pooled connection authenticates before the attack.
    let agent = client_from([127, 0, 0, 1], true);
    assert_eq!(intents(&agent, &gw_url, "tok-bob").0, 200);

    // Twenty guesses from 127.0.0.1, each on a new connection.
    let attacker = client_from([127, 0, 0, 1], false);
    let mut answers = Vec::new();
    for i in 0..20 {
        let (status, body) = intents(&attacker, &gw_url, &format!("{GUESS}-{i}"));
        answers.push((
            status,
            body["error"]["code"].as_str().unwrap_or("").to_owned(),
        ));
    }
    let unauthorised = answers.iter().filter(|(s, _)| *s == 401).count();
    let throttled = answers
        .iter()
        .filter(|(s, c)| *s == 429 && c == "OG-0057")
        .count();
    assert_eq!((unauthorised, throttled), (5, 15), "{answers:?}");
    // The address is refused before its token is checked: a right token on a new
    // connection from it waits too, so a guess that happens to be right learns nothing.
    let (status, body) = intents(&attacker, &gw_url, "tok-alice");
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("OG-0057")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("retry in"), "{message}");

    // The approver's proven connection is not slowed, and another address is not refused.
    for _ in 0..3 {
        assert_eq!(intents(&agent, &gw_url, "tok-bob").0, 200);
    }
    let neighbour = client_from([127, 0, 0, 2], false);
    assert_eq!(intents(&neighbour, &gw_url, "tok-alice").0, 200);

    // Console sign-ins count the same way, per address.
    let browser = client_from([127, 0, 0, 3], true);
    let tries: Vec<u16> = (0..7)
        .map(|i| sign_in(&browser, &gw_url, &format!("{GUESS}-console-{i}")))
        .collect();
    assert_eq!(tries, [401, 401, 401, 401, 401, 429, 429], "{tries:?}");

    // The metric counts what was refused; the log names the address, never a token.
    let metrics = agent
        .get(format!("{gw_url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let refused: f64 = metrics
        .lines()
        .find(|l| l.starts_with("oncegate_auth_throttled_total{by=\"address\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no throttle metric:\n{metrics}"));
    assert_eq!(refused, 18.0, "15 guesses, the right token, 2 sign-ins");
    log.wait_for(Duration::from_secs(5), |l| {
        l.contains("authentication throttled") && l.contains("127.0.0.1")
    })
    .unwrap_or_else(|lines| panic!("no throttle line:\n{}", lines.join("\n")));
    let lines = log.lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(GUESS) || l.contains("tok-alice") || l.contains("tok-bob")),
        "a token reached the log:\n{}",
        lines.join("\n")
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("authentication throttled"))
            .count(),
        2,
        "one line per throttled address, not one per guess"
    );
    drop(gw);
}
