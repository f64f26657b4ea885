//! The control socket: the daemon's local control plane, `DIR/meshnode.sock`.
//!
//! A Unix socket in the node directory, mode 0600 in a 0700 directory: only the node's
//! owner can connect, and nothing on it is reachable over the network. A client sends one
//! JSON line, `{"cmd": "status"}`, `{"cmd": "config"}`, `{"cmd": "reload"}`
//! ([`crate::reconcile`]) or `{"cmd": "apply", "manifests": […]}` ([`crate::apply`]), and
//! reads one JSON line back; an unknown command is answered `{"error": {"code":
//! "unknown_command", …}}`. Requests are bounded (1 MiB, 5 s to send). `meshnode ctl` and
//! `meshnode apply` are its clients; later issues add peers, grants and wallets here.
//!
//! On start, a socket file another daemon still answers on is refused (two daemons on one
//! node), one left by a daemon that died is replaced, and anything else at that path — not
//! a socket, or owned by another user — is refused, untouched, naming it. The socket is
//! removed when the daemon stops.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

/// The socket's file name, in the node directory.
pub const SOCKET: &str = "meshnode.sock";

/// Longest request line, bytes (`apply` carries manifests).
const MAX_REQUEST: u64 = 1 << 20;

/// What the daemon answers with: a function from the command and the whole request to its
/// answer (`None`: no such command).
pub type Handler = Arc<dyn Fn(&str, &Value) -> Option<Value> + Send + Sync>;

/// The bound socket; the file is removed when this is dropped.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `DIR/meshnode.sock` (0600), after checking what is already at that path. A
/// socket that cannot be bound where it is (a node directory whose path is longer than a
/// Unix socket address holds) is a warning, not a failure: `None`, and the daemon runs
/// without one.
///
/// # Errors
/// Another daemon answers on it; the path is not a socket, or is owned by another user.
pub fn bind(dir: &Path) -> anyhow::Result<Option<(tokio::net::UnixListener, Control)>> {
    let path = dir.join(SOCKET);
    if let Ok(m) = std::fs::symlink_metadata(&path) {
        let owner = std::fs::metadata(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .uid();
        if !m.file_type().is_socket() {
            bail!(
                "{} exists and is not a socket; move it away so the control socket can be made",
                path.display()
            );
        }
        if m.uid() != owner {
            bail!(
                "{} is owned by uid {}, not by the node's owner (uid {owner}); it is left as it is",
                path.display(),
                m.uid()
            );
        }
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            bail!(
                "another meshnode answers on {}: one daemon per node directory",
                path.display()
            );
        }
        // a daemon that died left it
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    let listener = match tokio::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "no control socket");
            return Ok(None);
        }
    };
    let control = Control { path: path.clone() };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} owner-only", path.display()))?;
    Ok(Some((listener, control)))
}

/// Answers connections on `listener` with `handler` until the task is dropped.
pub async fn serve(listener: tokio::net::UnixListener, handler: Handler) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader =
                tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
            let read = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line));
            let answer = match read.await {
                // off the runtime: a reload may load a model
                Ok(Ok(_)) if !line.ends_with('\n') && line.len() as u64 >= MAX_REQUEST => refusal(
                    "too_large",
                    format!("the control socket takes requests of at most {MAX_REQUEST} bytes"),
                ),
                Ok(Ok(_)) => tokio::task::spawn_blocking(move || answer(&handler, &line))
                    .await
                    .unwrap_or_else(|_| refusal("internal", "the command panicked")),
                Ok(Err(e)) => refusal("bad_request", format!("reading the request: {e}")),
                Err(_) => refusal("timeout", "no request within 5 s"),
            };
            let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
        });
    }
}

fn refusal(code: &str, message: impl Into<String>) -> Value {
    json!({"error": {"code": code, "message": message.into()}})
}

fn answer(handler: &Handler, line: &str) -> Value {
    let Ok(req) = serde_json::from_str::<Value>(line.trim()) else {
        return refusal(
            "bad_request",
            "send one JSON line, e.g. {\"cmd\": \"status\"}",
        );
    };
    let Some(cmd) = req["cmd"].as_str() else {
        return refusal("bad_request", "cmd must be a string");
    };
    handler(cmd, &req).unwrap_or_else(|| {
        refusal(
            "unknown_command",
            format!("no command {cmd:?}; there are status, config, reload and apply"),
        )
    })
}

/// Sends `cmd` to the daemon of the node in `dir`; its answer.
///
/// # Errors
/// No daemon answers on the socket, or the answer is not JSON.
pub fn ask(dir: &Path, cmd: &str) -> anyhow::Result<Value> {
    request(dir, &json!({"cmd": cmd}))
}

/// Sends the request `req` (`{"cmd": …, …}`) to the daemon of the node in `dir`; its answer.
///
/// # Errors
/// No daemon answers on the socket, or the answer is not JSON.
pub fn request(dir: &Path, req: &Value) -> anyhow::Result<Value> {
    let path = dir.join(SOCKET);
    let mut stream = std::os::unix::net::UnixStream::connect(&path).with_context(|| {
        format!(
            "no daemon answers on {} (is `meshnode run {}` running?)",
            path.display(),
            dir.display()
        )
    })?;
    // an apply or reload may load a model first
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let line = format!("{req}\n");
    if line.len() as u64 > MAX_REQUEST {
        bail!(
            "the request is {} bytes; the control socket takes requests of at most {} bytes \
             (1 MiB: split the manifests into several applies, or put them in the watched \
             manifest directory)",
            line.len(),
            MAX_REQUEST
        );
    }
    stream.write_all(line.as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("reading the answer on {}", path.display()))?;
    serde_json::from_str(&line).with_context(|| format!("the answer {line:?} is not JSON"))
}
