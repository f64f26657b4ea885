//! Messages over a QUIC stream: the relay's WebSocket messages (text, ping, pong, close)
//! as frames of one type byte, a 4-byte big-endian length and the payload. A frame past
//! the stream's cap, an unknown type or text that is not UTF-8 ends the stream.
//!
//! Two ends: [`client`] turns a stream into a [`Link`] (what `fleetmesh_relay::sync`
//! talks over; pings are answered here) and [`server`] into the stream and sink that
//! [`fleetmesh_relay::face::Relay::serve_frames`] serves as it serves a WebSocket.

use std::pin::Pin;

use axum::extract::ws::Message;
use fleetmesh_relay::sync::Link;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

const TEXT: u8 = 0;
const PING: u8 = 1;
const PONG: u8 = 2;
const CLOSE: u8 = 3;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A NIP-01 message.
    Text(String),
    /// A liveness probe, answered by a pong with the same bytes.
    Ping(Vec<u8>),
    /// The answer to a ping.
    Pong(Vec<u8>),
    /// The end of the session.
    Close,
}

/// Reads the next frame, at most `cap` bytes of payload; `Ok(None)` at a clean end.
///
/// # Errors
/// A message naming what was wrong: an oversized or unknown frame, text that is not
/// UTF-8, a stream cut inside a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    cap: usize,
) -> Result<Option<Frame>, String> {
    let mut head = [0u8; 5];
    match r.read(&mut head[..1]).await {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    r.read_exact(&mut head[1..])
        .await
        .map_err(|e| format!("read: {e}"))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > cap {
        return Err(format!("a frame of {len} bytes is over the {cap}-byte cap"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .await
        .map_err(|e| format!("read: {e}"))?;
    Ok(Some(match head[0] {
        TEXT => Frame::Text(String::from_utf8(body).map_err(|_| "text that is not UTF-8")?),
        PING => Frame::Ping(body),
        PONG => Frame::Pong(body),
        CLOSE => Frame::Close,
        t => return Err(format!("unknown frame type {t}")),
    }))
}

/// Writes one frame.
///
/// # Errors
/// The stream's, or a payload over 4 GiB.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    let (t, body): (u8, &[u8]) = match frame {
        Frame::Text(s) => (TEXT, s.as_bytes()),
        Frame::Ping(b) => (PING, b),
        Frame::Pong(b) => (PONG, b),
        Frame::Close => (CLOSE, &[]),
    };
    let len = u32::try_from(body.len()).map_err(|_| std::io::Error::other("a frame over 4 GiB"))?;
    let mut buf = Vec::with_capacity(5 + body.len());
    buf.push(t);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf).await
}

/// The client end: text messages through a [`Link`], pings answered. The link's `rx`
/// ends when the peer closes the stream or breaks the framing; dropping the link's `tx`
/// finishes the stream.
///
/// With `tally`, every text message is counted in it as it crosses (an `EVENT` message as
/// an event), as the peer's face counts the same messages on its side.
pub(crate) fn client<R, W>(
    mut recv: R,
    mut send: W,
    cap: usize,
    tally: Option<std::sync::Arc<fleetmesh_relay::face::Tally>>,
) -> Link
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<String>(64);
    let (pong_tx, mut pong_rx) = mpsc::channel::<Vec<u8>>(4);
    let tally_in = tally.clone();
    tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                text = out_rx.recv() => match text {
                    Some(t) => {
                        if let Some(tally) = &tally {
                            tally.sent_message(&t);
                        }
                        Frame::Text(t)
                    }
                    None => break,
                },
                Some(p) = pong_rx.recv() => Frame::Pong(p),
            };
            if write_frame(&mut send, &frame).await.is_err() {
                return;
            }
        }
        let _ = write_frame(&mut send, &Frame::Close).await;
        let _ = send.shutdown().await;
    });
    tokio::spawn(async move {
        loop {
            match read_frame(&mut recv, cap).await {
                Ok(Some(Frame::Text(t))) => {
                    if let Some(tally) = &tally_in {
                        tally.received_message(&t);
                    }
                    if in_tx.send(t).await.is_err() {
                        return;
                    }
                }
                Ok(Some(Frame::Ping(p))) => {
                    let _ = pong_tx.try_send(p);
                }
                Ok(Some(Frame::Pong(_))) => {}
                Ok(Some(Frame::Close) | None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "peer link stream ended");
                    return;
                }
            }
        }
    });
    Link {
        tx: out_tx,
        rx: in_rx,
    }
}

/// The stream of messages a server end reads.
pub(crate) type Incoming = Pin<Box<dyn Stream<Item = Result<Message, axum::Error>> + Send>>;
/// The sink a server end writes.
pub(crate) type Outgoing = Pin<Box<dyn Sink<Message, Error = std::io::Error> + Send>>;

/// The server end: the stream and sink of WebSocket messages that the relay serves.
pub(crate) fn server<R, W>(recv: R, send: W, cap: usize) -> (Incoming, Outgoing)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let incoming = futures_util::stream::unfold(Some(recv), move |state| async move {
        let mut recv = state?;
        match read_frame(&mut recv, cap).await {
            Ok(Some(Frame::Text(t))) => Some((Ok(Message::Text(t.into())), Some(recv))),
            Ok(Some(Frame::Ping(p))) => Some((Ok(Message::Ping(p.into())), Some(recv))),
            Ok(Some(Frame::Pong(p))) => Some((Ok(Message::Pong(p.into())), Some(recv))),
            Ok(Some(Frame::Close) | None) => None,
            Err(e) => Some((Err(axum::Error::new(std::io::Error::other(e))), None)),
        }
    });
    let outgoing = futures_util::sink::unfold(send, |mut send, msg: Message| async move {
        let frame = match msg {
            Message::Text(t) => Frame::Text(t.as_str().to_owned()),
            Message::Ping(p) => Frame::Ping(p.to_vec()),
            Message::Pong(p) => Frame::Pong(p.to_vec()),
            Message::Close(_) => Frame::Close,
            Message::Binary(_) => return Ok(send),
        };
        write_frame(&mut send, &frame).await?;
        if frame == Frame::Close {
            send.shutdown().await?;
        }
        Ok(send)
    });
    (Box::pin(incoming), Box::pin(outgoing))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn roundtrip(frame: Frame) -> Result<Option<Frame>, String> {
        let mut buf = Vec::new();
        write_frame(&mut buf, &frame).await.unwrap();
        read_frame(&mut buf.as_slice(), 16).await
    }

    #[tokio::test]
    async fn frames_roundtrip_and_refuse_what_breaks_the_framing() {
        for f in [
            Frame::Text("[\"EOSE\",\"x\"]".into()),
            Frame::Ping(vec![1, 2]),
            Frame::Pong(vec![]),
            Frame::Close,
        ] {
            let back = roundtrip(f.clone()).await;
            assert_eq!(back, Ok(Some(f)));
        }
        // over the cap
        let err = roundtrip(Frame::Text("x".repeat(17))).await.unwrap_err();
        assert!(err.contains("over the 16-byte cap"), "{err}");
        // unknown type, bad UTF-8, cut inside a frame, clean end
        let read = |b: Vec<u8>| async move { read_frame(&mut b.as_slice(), 16).await };
        assert!(
            read(vec![9, 0, 0, 0, 0])
                .await
                .unwrap_err()
                .contains("unknown frame type 9")
        );
        assert!(
            read(vec![0, 0, 0, 0, 1, 0xff])
                .await
                .unwrap_err()
                .contains("UTF-8")
        );
        assert!(
            read(vec![0, 0, 0, 0, 4, b'a'])
                .await
                .unwrap_err()
                .starts_with("read:")
        );
        assert_eq!(read(vec![]).await, Ok(None));
    }
}
