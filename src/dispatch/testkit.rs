//! A scripted HTTP/1.1 endpoint on 127.0.0.1, for the dispatcher's tests and the black-box
//! tests in `tests/`.
//!
//! It is a real server on a real socket (raw tokio TCP, so it can also misbehave at the
//! connection level: reset or hang up without answering). It records every request and
//! the highest number of requests it was handling at once.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use tidemark::dispatch::testkit::{Behaviour, TestServer};
//! let server = TestServer::start(Behaviour::FailFirst { n: 2, status: 503 }).await?;
//! let url = server.url("/actions");
//! // ... POST to `url` ...
//! assert!(server.requests().iter().all(|r| r.header("idempotency-key").is_some()));
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// How the server answers. Counts (`n`) run from the moment the behaviour is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 to everything.
    Ok,
    /// This status to everything, with body `scripted <code>`.
    Status(u16),
    /// `status` to the first `n` requests, then 200.
    FailFirst { n: usize, status: u16 },
    /// 200 after sleeping this long (longer than the client's timeout, to provoke one).
    Slow(Duration),
    /// 200 after sleeping this long, within the client's timeout: a slow endpoint that
    /// still acknowledges (recorded as answered).
    SlowAnswer(Duration),
    /// Read the request, then reset the connection (RST) without answering.
    Reset,
    /// Reset the first `n` requests, then 200.
    ResetFirst(usize),
    /// Read the request, then close the connection cleanly (FIN) without answering.
    Close,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the whole request had been read.
    pub arrived: Instant,
    /// The status the server answered in time for the client to see it; `None` for resets,
    /// hang-ups and answers delayed past the client's timeout (`Slow`).
    pub answered: Option<u16>,
}

impl Recorded {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub struct TestServer {
    addr: SocketAddr,
    base: reqwest::Url,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
    connections: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

struct Script {
    behaviour: Behaviour,
    served: usize,
}

enum Action {
    Respond(u16),
    /// 200 past the client's timeout: not seen as answered.
    RespondAfter(Duration),
    /// 200 within the client's timeout.
    AnswerAfter(Duration),
    Reset,
    Close,
}

impl Script {
    fn next(&mut self) -> Action {
        let i = self.served;
        self.served += 1;
        match self.behaviour {
            Behaviour::Ok => Action::Respond(200),
            Behaviour::Status(code) => Action::Respond(code),
            Behaviour::FailFirst { n, status } => Action::Respond(if i < n { status } else { 200 }),
            Behaviour::Slow(delay) => Action::RespondAfter(delay),
            Behaviour::SlowAnswer(delay) => Action::AnswerAfter(delay),
            Behaviour::Reset => Action::Reset,
            Behaviour::ResetFirst(n) if i < n => Action::Reset,
            Behaviour::ResetFirst(_) => Action::Respond(200),
            Behaviour::Close => Action::Close,
        }
    }
}

impl TestServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    pub async fn start(behaviour: Behaviour) -> io::Result<TestServer> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let base = reqwest::Url::parse(&format!("http://{addr}/"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let shared = Arc::new(Shared {
            script: Mutex::new(Script { behaviour, served: 0 }),
            requests: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(TestServer { addr, base, shared, accept })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        url.set_path(path);
        url
    }

    /// Replaces the behaviour; `FailFirst`/`ResetFirst` count from here.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *lock(&self.shared.script) = Script { behaviour, served: 0 };
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The most requests that were received and not yet answered at any one time.
    pub fn max_concurrency(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection.
        self.accept.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    connections.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Counts a request as in flight from its full receipt until the answer starts (or the
/// connection is dropped), so the count never exceeds what the client has outstanding.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let mut stream = BufReader::new(stream);
    // Keep-alive: serve requests until the client hangs up or a behaviour drops the socket.
    while let Ok(Some(request)) = read_request(&mut stream).await {
        let in_flight = InFlight::enter(&shared);
        let action = lock(&shared.script).next();
        let mut request = request;
        request.answered = match action {
            Action::Respond(status) => Some(status),
            Action::AnswerAfter(_) => Some(200),
            _ => None,
        };
        lock(&shared.requests).push(request);
        let status = match action {
            Action::Respond(status) => status,
            Action::RespondAfter(delay) | Action::AnswerAfter(delay) => {
                tokio::time::sleep(delay).await;
                200
            }
            Action::Reset => {
                drop(in_flight);
                let _ = stream.get_ref().set_zero_linger();
                return;
            }
            Action::Close => return,
        };
        drop(in_flight);
        if write_response(stream.get_mut(), status).await.is_err() {
            return;
        }
    }
}

/// Reads one request with a `Content-Length` body; `None` at a clean end of stream.
async fn read_request<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Option<Recorded>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let value = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    if value("transfer-encoding").is_some() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "chunked request bodies are not supported"));
    }
    let length = match value("content-length") {
        Some(v) => v.parse::<usize>().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
        None => 0,
    };
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(Some(Recorded { method, path, headers, body, arrived: Instant::now(), answered: None }))
}

async fn write_response(stream: &mut TcpStream, status: u16) -> io::Result<()> {
    let reason = reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Scripted");
    let body = format!("scripted {status}");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await
}
