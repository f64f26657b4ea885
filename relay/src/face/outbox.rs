//! A connection's outbound queue, bounded in bytes.
//!
//! Every message waiting to be written counts against two budgets: the connection's own
//! (`[relay] max_queued_bytes`) and one shared by all connections
//! (`[relay] max_queued_bytes_total`). Replies, `OK`s and live events are queued with
//! [`Outbox::try_send`], which refuses when either budget is spent: the connection is then
//! too slow (or the node is out of room for output) and is closed, not its neighbours.
//! A REQ's stored events are queued with [`Outbox::send_bulk`], which *waits* until the
//! connection has drained below half its budget: a query produces its answer as fast as
//! the client reads it, never all of it first, and leaves the other half of the budget for
//! live events and `OK`s so a client reading at a normal pace is never taken for a slow one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use axum::extract::ws::Message;
use tokio::sync::{Notify, mpsc};

/// A message and the bytes it holds in the budgets.
pub(super) struct Queued {
    pub msg: Message,
    pub bytes: usize,
}

/// Bytes queued for output on every connection together.
#[derive(Debug, Default)]
pub struct OutputBudget {
    used: AtomicUsize,
}

impl OutputBudget {
    /// Bytes queued now.
    pub fn used(&self) -> usize {
        self.used.load(SeqCst)
    }
}

struct State {
    queued: AtomicUsize,
    cap: usize,
    global: Arc<OutputBudget>,
    global_cap: usize,
    drained: Notify,
}

impl Drop for State {
    fn drop(&mut self) {
        // what a closed connection never wrote goes back to the shared budget
        self.global.used.fetch_sub(*self.queued.get_mut(), SeqCst);
    }
}

/// The sending side, shared by the connection's tasks and the store's callbacks.
#[derive(Clone)]
pub(super) struct Outbox {
    tx: mpsc::UnboundedSender<Queued>,
    state: Arc<State>,
}

/// The writing side, owned by the connection's writer task.
pub(super) struct Drain {
    pub rx: mpsc::UnboundedReceiver<Queued>,
    state: Arc<State>,
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The connection's own budget is spent: it reads too slowly.
    Slow,
    /// The budget shared by all connections is spent.
    NodeFull,
    /// The connection is gone.
    Closed,
}

/// A queue for one connection: at most `cap` bytes of its own (at least one message of any
/// size fits an empty queue), within `global_cap` bytes of `global` shared by all.
pub(super) fn outbox(cap: usize, global: Arc<OutputBudget>, global_cap: usize) -> (Outbox, Drain) {
    let (tx, rx) = mpsc::unbounded_channel();
    let state = Arc::new(State {
        queued: AtomicUsize::new(0),
        cap: cap.max(1),
        global,
        global_cap,
        drained: Notify::new(),
    });
    (
        Outbox {
            tx,
            state: state.clone(),
        },
        Drain { rx, state },
    )
}

fn size(msg: &Message) -> usize {
    match msg {
        Message::Text(t) => t.len(),
        Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b.len(),
        Message::Close(_) => 0,
    }
}

impl Outbox {
    /// Takes `bytes` from both budgets if they fit under `limit` of the connection's.
    fn reserve(&self, bytes: usize, limit: usize) -> Result<bool, Refused> {
        let s = &self.state;
        let before = s.queued.fetch_add(bytes, SeqCst);
        // one message always fits an empty queue, whatever its size
        if before > 0 && before + bytes > limit {
            s.queued.fetch_sub(bytes, SeqCst);
            return Ok(false);
        }
        let global = s.global.used.fetch_add(bytes, SeqCst);
        if global + bytes > s.global_cap {
            s.global.used.fetch_sub(bytes, SeqCst);
            s.queued.fetch_sub(bytes, SeqCst);
            return Err(Refused::NodeFull);
        }
        Ok(true)
    }

    fn enqueue(&self, msg: Message, bytes: usize) -> Result<(), Refused> {
        self.tx.send(Queued { msg, bytes }).map_err(|_| {
            self.release(bytes);
            Refused::Closed
        })
    }

    fn release(&self, bytes: usize) {
        self.state.queued.fetch_sub(bytes, SeqCst);
        self.state.global.used.fetch_sub(bytes, SeqCst);
    }

    /// Queues `msg` now, or says why not (the caller closes the connection).
    pub fn try_send(&self, msg: Message) -> Result<(), Refused> {
        let bytes = size(&msg);
        match self.reserve(bytes, self.state.cap)? {
            true => self.enqueue(msg, bytes),
            false => Err(Refused::Slow),
        }
    }

    /// Queues a close frame past the budgets (it is the last message).
    pub fn tx_close(&self, code: u16, reason: &str) -> Result<(), Refused> {
        let frame = axum::extract::ws::CloseFrame {
            code,
            reason: reason.to_owned().into(),
        };
        self.enqueue(Message::Close(Some(frame)), 0)
    }

    /// Queues `msg` once the connection has drained below half its budget (backpressure
    /// for bulk output such as a query's answer).
    pub async fn send_bulk(&self, msg: Message) -> Result<(), Refused> {
        let bytes = size(&msg);
        let half = self.state.cap / 2;
        loop {
            let drained = self.state.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.reserve(bytes, half)? {
                return self.enqueue(msg, bytes);
            }
            if self.tx.is_closed() {
                return Err(Refused::Closed);
            }
            drained.await;
        }
    }
}

impl Drain {
    /// Gives back the budget of messages written.
    pub fn written(&self, bytes: usize) {
        if bytes > 0 {
            self.state.queued.fetch_sub(bytes, SeqCst);
            self.state.global.used.fetch_sub(bytes, SeqCst);
        }
        self.state.drained.notify_waiters();
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        // wake bulk senders so they see the connection is gone
        self.state.drained.notify_waiters();
    }
}
