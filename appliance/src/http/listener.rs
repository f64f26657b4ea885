//! The node's one listener: the accept loop every face is served from.
//!
//! It is written out rather than left to `axum::serve` because a node on the open
//! internet needs what that does not give: a deadline for the request head (a socket
//! that sends no complete request within `[face] header_timeout_secs` is closed — this
//! also closes idle keep-alive connections), caps on open connections in all and per
//! client address (a connection over either is closed at once), an accept loop that
//! survives running out of file descriptors (it waits and retries instead of spinning or
//! stopping), and a shutdown that stops accepting, lets requests in flight finish for at
//! most `[face] shutdown_secs`, then closes whatever is left. Connections upgraded to
//! WebSockets keep their place under the caps until the socket closes.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tower_service::Service as _;
use tracing::{debug, info, warn};

/// How the listener treats connections (`[face]`).
#[derive(Debug, Clone)]
pub struct Options {
    /// A connection that has not sent a complete request head within this is closed.
    pub header_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one IP address.
    pub max_per_ip: usize,
    /// Addresses the per-IP cap does not apply to (a reverse proxy on the box).
    pub per_ip_exempt: Vec<IpAddr>,
    /// How long requests in flight may take to finish once shutdown begins.
    pub shutdown: Duration,
}

/// Connections open per client address.
#[derive(Default)]
struct PerIp {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place under the caps, given back when the socket is dropped.
struct Place {
    _global: OwnedSemaphorePermit,
    /// The per-IP count it holds a place in (none for an exempt address).
    per_ip: Option<(Arc<PerIp>, IpAddr)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some((per_ip, ip)) = &self.per_ip else {
            return;
        };
        let mut open = per_ip.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(ip);
            }
        }
    }
}

/// A TCP stream that holds its place under the caps for as long as it lives (through an
/// upgrade to a WebSocket too).
struct Held {
    stream: TcpStream,
    _place: Place,
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Whether an accept error means the process or system is out of a resource (file
/// descriptors, memory): worth a pause, not a stop.
fn resource_exhausted(e: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12))
}

/// Serves `app` on `listener` until `stop` resolves, then shuts down within
/// `opts.shutdown`. Each request sees its client's address as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: Options,
    stop: impl Future<Output = ()>,
) {
    let global = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let per_ip = Arc::new(PerIp::default());
    let (closing, _) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut make = app.into_make_service_with_connect_info::<SocketAddr>();
    let mut last_warning: Option<Instant> = None;
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            // finished connections are collected as they end
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if resource_exhausted(&e) => {
                    if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        warn!(error = %e, open = opts.max_connections - global.available_permits(),
                              "cannot accept connections: out of resources; retrying");
                        last_warning = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => {
                    debug!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let Some(place) = admit(&global, &per_ip, peer.ip(), &opts) else {
            debug!(%peer, "connection refused: at the connection cap");
            drop(stream); // closed at once
            continue;
        };
        if let Err(err) = stream.set_nodelay(true) {
            debug!(%err, "could not set TCP_NODELAY");
        }
        let svc = match make.call(peer).await {
            Ok(s) => s,
            Err(never) => match never {},
        };
        let io = TokioIo::new(Held {
            stream,
            _place: place,
        });
        let header_timeout = opts.header_timeout;
        let mut closing = closing.subscribe();
        conns.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder
                .serve_connection(io, hyper_util::service::TowerToHyperService::new(svc))
                .with_upgrades();
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = async { let _ = closing.wait_for(|c| *c).await; } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    let open = conns.len();
    if open > 0 {
        info!(
            connections = open,
            deadline_secs = opts.shutdown.as_secs(),
            "finishing requests in flight"
        );
    }
    let finished = tokio::time::timeout(opts.shutdown, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        info!(
            connections = conns.len(),
            "shutdown deadline passed; closing the rest"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

/// A place under both caps for a connection from `ip` (under the global one only for an
/// exempt address), or `None` when one is full.
fn admit(
    global: &Arc<Semaphore>,
    per_ip: &Arc<PerIp>,
    ip: IpAddr,
    opts: &Options,
) -> Option<Place> {
    let permit = global.clone().try_acquire_owned().ok()?;
    let ip = ip.to_canonical();
    if opts.per_ip_exempt.contains(&ip) {
        return Some(Place {
            _global: permit,
            per_ip: None,
        });
    }
    let mut open = per_ip.open.lock().unwrap_or_else(|p| p.into_inner());
    let n = open.entry(ip).or_insert(0);
    if *n >= opts.max_per_ip {
        return None;
    }
    *n += 1;
    Some(Place {
        _global: permit,
        per_ip: Some((per_ip.clone(), ip)),
    })
}

/// Middleware: a response sent before the request's body was read to its end says
/// `Connection: close` (RFC 9112 §9.6). Refusals come before bodies here (the guard, the
/// budget, Blossom's authorization and quota), and the connection closes after such a
/// response; without the header a client that sent the whole body reuses the connection
/// and its next request fails.
pub async fn close_unread(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::header;
    let headers = req.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if !has_body {
        return next.run(req).await;
    }
    let read = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let body = axum::body::Body::new(ReadToEnd {
        inner: body,
        read: read.clone(),
    });
    let mut response = next
        .run(axum::extract::Request::from_parts(parts, body))
        .await;
    if !read.load(std::sync::atomic::Ordering::Relaxed) {
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// A request body that notes when it has been read to its end.
struct ReadToEnd {
    inner: axum::body::Body,
    read: Arc<std::sync::atomic::AtomicBool>,
}

impl hyper::body::Body for ReadToEnd {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
