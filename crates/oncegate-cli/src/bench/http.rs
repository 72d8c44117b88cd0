//! An HTTP/1.1 target for the load generator: one keep-alive connection per worker
//! (hyper's bare client connection, no pool), a request built per number, and an answer
//! checked before it counts, so a benchmark of errors cannot pass for a fast one.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;

use super::load::Target;

/// Builds request `n`: its body and the headers that vary per request.
pub type MakeRequest = Box<dyn Fn(u64) -> (Bytes, Vec<(HeaderName, HeaderValue)>) + Send + Sync>;

/// `POST` (or `GET`) `path` on `addr`, answered 2xx with a body that holds every
/// `expect` and no `reject` substring.
pub struct HttpTarget {
    method: hyper::Method,
    addr: SocketAddr,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    make: MakeRequest,
    expect: Vec<&'static str>,
    reject: Vec<&'static str>,
}

impl HttpTarget {
    /// A target posting to `url` (`http://host:port/path`).
    pub fn post(url: &str, make: MakeRequest) -> anyhow::Result<Self> {
        Self::new(hyper::Method::POST, url, make)
    }

    /// A target reading `url` (`http://host:port/path?query`).
    pub fn get(url: &str) -> anyhow::Result<Self> {
        Self::new(
            hyper::Method::GET,
            url,
            Box::new(|_| (Bytes::new(), Vec::new())),
        )
    }

    fn new(method: hyper::Method, url: &str, make: MakeRequest) -> anyhow::Result<Self> {
        let uri: hyper::Uri = url.parse()?;
        let authority = uri
            .authority()
            .ok_or_else(|| anyhow::anyhow!("{url} names no host"))?;
        let addr: SocketAddr = authority.as_str().parse()?;
        Ok(Self {
            method,
            addr,
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            headers: vec![
                (
                    hyper::header::HOST,
                    HeaderValue::from_str(authority.as_str())?,
                ),
                (
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
            ],
            make,
            expect: Vec::new(),
            reject: Vec::new(),
        })
    }

    /// A header sent with every request.
    pub fn header(mut self, name: &'static str, value: &str) -> anyhow::Result<Self> {
        self.headers
            .push((HeaderName::from_static(name), HeaderValue::from_str(value)?));
        Ok(self)
    }

    /// The answer must contain `text`.
    pub fn expect(mut self, text: &'static str) -> Self {
        self.expect.push(text);
        self
    }

    /// The answer must not contain `text`.
    pub fn reject(mut self, text: &'static str) -> Self {
        self.reject.push(text);
        self
    }

    /// Sends request `n` on a connection of its own: for setting up (seeding replays).
    pub async fn once(&self, n: u64) -> Result<(), String> {
        let mut conn = self.connect().await?;
        self.call(&mut conn, n).await
    }
}

impl Target for HttpTarget {
    type Conn = SendRequest<Full<Bytes>>;

    async fn connect(&self) -> Result<Self::Conn, String> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    async fn call(&self, conn: &mut Self::Conn, n: u64) -> Result<(), String> {
        let (body, extra) = (self.make)(n);
        let mut request = hyper::Request::builder()
            .method(self.method.clone())
            .uri(self.path.as_str())
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let headers = request.headers_mut();
        for (name, value) in self.headers.iter().chain(extra.iter()) {
            headers.insert(name.clone(), value.clone());
        }
        conn.ready().await.map_err(|e| format!("connection: {e}"))?;
        let response = conn
            .send_request(request)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("answer: {e}"))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        if !status.is_success()
            || self.expect.iter().any(|t| !text.contains(t))
            || self.reject.iter().any(|t| text.contains(t))
        {
            let shown: String = text.chars().take(300).collect();
            return Err(format!("{} answered {status}: {shown}", self.path));
        }
        Ok(())
    }
}
