//! One established connection to another node: its outbound buffers and
//! the task writing them, the task reading and dispatching its frames, and
//! the [`Route`] that proxies of that node's actors send through.
//!
//! Sending: a sender encodes its message straight into the connection's
//! user (or control) buffer under one short lock, on its own thread. The
//! writer task swaps the buffers for empty ones and writes both, control
//! first, so everything queued while a write was in flight goes out in the
//! next write (coalescing) and no buffer is allocated per message. The
//! buffers are bounded: past the outbound limit a `tell` is refused with
//! `Full` (its message handed back) and `send().await` waits for room.
//!
//! Order: one connection carries everything from this node to that one,
//! and both tasks keep order, so messages from one sender to one receiver
//! arrive in the order sent. Control requests overtake user messages;
//! `Down`s and link exits do not (see `wire.rs`).
//!
//! When the connection is lost (read error, framing error, silence past
//! the heartbeat timeout), everything waiting on the peer ends at once:
//! pending asks with `ConnectionLost`, monitors with `Down` and links with
//! an exit, both with `ExitReason::NoConnection`, and later sends to its
//! proxies are dead letters.

use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use troubadour::remote::{
    proxy, with_ref_codec, ControlRef, Outgoing, OutgoingSignal, RefCodec, RefTarget, Refusal,
    RemoteProcess, Resolved, Route, TurnEnd, Watch, WireRef,
};
use troubadour::{ActorId, AskError, Down, ExitReason, Immediate, NodeId};

use crate::arrivals::ArrivalRunner;
use crate::codec::{decode_payload, serialize_into};
use crate::connection::Stream;
use crate::frame::{encode_frame, encode_frame_with, Frame, FrameDecoder, Header, Kind, Lane};
use crate::link::NodeLink;
use crate::messages::{Asked, Delivered, PendingReply};
use crate::node::Shared;
use crate::trace_context::{self, TraceContext, SYSTEM_TRACE};
use crate::wire::{self, reply, Control, DownFrame, ExitFrame, WireReason};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes waiting to be written.
struct Outbound {
    control: BytesMut,
    user: BytesMut,
    /// Frames in `control` and `user`, counted as sent when a writer takes
    /// them.
    frames: u64,
    next_request: u64,
    /// Bytes a writer took and could not finish (possibly ending in the
    /// middle of a frame): they go before anything else.
    leftover: BytesMut,
    /// Someone is writing to the stream: only they take bytes now, so
    /// bytes reach the stream in the order they were queued.
    writing: bool,
    /// A direct write left bytes in the TLS layer; the writer task flushes.
    needs_flush: bool,
}

/// Bookkeeping of links and monitors that cross this connection, so that
/// losing it ends each of them.
#[derive(Default)]
struct Crossing {
    /// Watches of this node on actors of the peer: number → (target, watch).
    watches: HashMap<u64, (u64, Watch)>,
    next_watch: u64,
    /// Links from local actors to the peer's: (local, remote) → local.
    links_out: HashMap<(u64, u64), ControlRef>,
    /// Links from the peer's actors to local ones: (remote, local) → local.
    links_in: HashMap<(u64, u64), ControlRef>,
    /// Monitors by the peer of local actors: (watch, local) → local.
    monitors_in: HashMap<(u64, u64), ControlRef>,
}

pub(crate) struct Peer {
    pub(crate) node: NodeId,
    pub(crate) link: Arc<NodeLink>,
    tls: AtomicBool,
    /// The peer's certificate chain (end entity first) on a TLS
    /// connection, checked again when the revocation lists change.
    certificates: Mutex<Vec<rustls::pki_types::CertificateDer<'static>>>,
    /// It has a connection under it (see `established`).
    running: AtomicBool,
    pub(crate) shared: Arc<Shared>,
    out: Mutex<Outbound>,
    /// The stream's write half, once connected: the writer task writes
    /// with it, and so does a sender that finds nobody writing (see
    /// `write_through`).
    writer: Mutex<Option<tokio::io::WriteHalf<Stream>>>,
    wake_writer: Notify,
    /// This connection's flush, deferred to the end of an actor turn that
    /// sent to it (see `flush_soon`).
    flush: Arc<dyn TurnEnd>,
    room: Notify,
    pending: Mutex<HashMap<u64, PendingReply>>,
    lookups: Mutex<HashMap<u64, oneshot::Sender<Result<u64, String>>>>,
    crossing: Mutex<Crossing>,
    /// Proxies made from references that named the peer's own actors, by
    /// (serial, `TypeId` of the reference): a reply-to reference in every
    /// message resolves to the same proxy. Emptied when it reaches
    /// `PROXY_CACHE` entries and when the connection is lost.
    proxies: Mutex<HashMap<(u64, std::any::TypeId), Arc<dyn std::any::Any + Send + Sync>>>,
    lost: AtomicBool,
    closed: Notify,
    /// The trace context of the next message frame received, which the
    /// peer sent just before it (`trace_context.rs`), and whether there is
    /// one: an untraced message does not take the lock. Only the reader
    /// dispatches, so neither races.
    incoming_trace: Mutex<Option<TraceContext>>,
    traced: AtomicBool,
    /// In a simulated connection: the answers to incoming asks, awaited by
    /// the simulation (`sim.rs`); `None` on a real one (tokio tasks).
    pub(crate) answers: Option<Mutex<Vec<crate::messages::AnswerFuture>>>,
    /// In a simulated connection: the frames received, not yet decoded.
    #[cfg_attr(not(feature = "simulation"), allow(dead_code))]
    pub(crate) sim_decoder: Option<Mutex<FrameDecoder>>,
}

impl Peer {
    /// A connection to `link`'s node with nothing under it yet: what is
    /// sent waits in its buffers until [`run`](Self::run) (or is dropped
    /// with it if no connection comes). Listed among the node's
    /// connections from the start, so a shutdown ends it whatever state it
    /// is in (being dialled, waiting, established).
    pub(crate) fn new(shared: &Arc<Shared>, link: Arc<NodeLink>) -> Arc<Peer> {
        let peer = Arc::new_cyclic(|me| Peer {
            node: link.node.clone(),
            link,
            tls: AtomicBool::new(false),
            certificates: Mutex::new(Vec::new()),
            running: AtomicBool::new(false),
            shared: shared.clone(),
            out: Mutex::new(Outbound {
                control: BytesMut::with_capacity(4096),
                user: BytesMut::with_capacity(64 * 1024),
                frames: 0,
                next_request: 1,
                leftover: BytesMut::new(),
                writing: false,
                needs_flush: false,
            }),
            writer: Mutex::new(None),
            wake_writer: Notify::new(),
            flush: Arc::new(TurnEndFlush(me.clone())),
            room: Notify::new(),
            pending: Mutex::new(HashMap::new()),
            lookups: Mutex::new(HashMap::new()),
            crossing: Mutex::new(Crossing {
                next_watch: 1,
                ..Crossing::default()
            }),
            proxies: Mutex::new(HashMap::new()),
            lost: AtomicBool::new(false),
            closed: Notify::new(),
            incoming_trace: Mutex::new(None),
            traced: AtomicBool::new(false),
            answers: shared.simulated.then(|| Mutex::new(Vec::new())),
            sim_decoder: shared
                .simulated
                .then(|| Mutex::new(FrameDecoder::new(shared.limits))),
        });
        shared.track(&peer);
        peer
    }

    /// Starts the reader and writer tasks on an established connection,
    /// and tells the peer where this node listens.
    pub(crate) fn run(self: &Arc<Self>, stream: Stream, mut decoder: FrameDecoder) {
        // Bytes the handshake read past its own frames.
        let early = decoder.buffer_mut().len() as u64;
        self.link.traffic.received.add(early, 0);
        self.tls
            .store(matches!(stream, Stream::Tls(_)), Ordering::Release);
        *lock(&self.certificates) = stream.peer_chain();
        self.established();
        self.queue_control(&Control::Hello {
            listen: self.shared.advertised_addr.map(|a| a.to_string()),
        });
        // The I/O thread looks at this socket a moment before it sleeps, so
        // an answer that comes back quickly is read without a wake-up.
        #[cfg(unix)]
        troubadour::remote::busy_poll(&self.shared.system, stream.tcp());
        let (reader, writer) = tokio::io::split(stream);
        *lock(&self.writer) = Some(writer);
        let rt = self.shared.runtime.clone();
        let p = self.clone();
        rt.spawn(async move {
            let reason = p.clone().write_loop().await;
            p.lose(reason);
        });
        let p = self.clone();
        rt.spawn(async move {
            let reason = p.clone().read_loop(reader, decoder).await;
            p.lose(reason);
        });
    }

    /// Dials the node again at `addr` after `delay`, and runs on the
    /// connection if it is still the same node (name and incarnation).
    pub(crate) fn dial(self: &Arc<Self>, addr: SocketAddr, delay: Duration) {
        let p = self.clone();
        self.shared.runtime.spawn(async move {
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = p.closed.notified() => return,
                }
            }
            if p.is_lost() {
                return;
            }
            match p
                .shared
                .endpoint
                .connect(addr, &addr.ip().to_string())
                .await
            {
                Ok(conn) => {
                    let who = conn.peer();
                    if who.node_name == p.node.name() && who.incarnation == p.node.incarnation() {
                        let (stream, decoder, _) = conn.into_parts();
                        p.run(stream, decoder);
                    } else {
                        // Another incarnation listens there now: the node
                        // restarted, and the one we knew is gone for good.
                        let reason = format!(
                            "{addr} is now node {} incarnation {:#x}: the node restarted",
                            who.node_name, who.incarnation
                        );
                        p.link.declare_down();
                        p.lose(reason);
                        crate::node::attach(&p.shared, conn, Some(addr));
                    }
                }
                Err(e) => {
                    p.link.failed();
                    p.lose(format!("reconnecting to {addr} failed: {e}"));
                }
            }
        });
    }

    /// A connection is under it now (a socket, or a simulated one).
    pub(crate) fn established(&self) {
        self.running.store(true, Ordering::Release);
        self.link.connected();
    }

    /// Whether a connection is under it (it is not being dialled or
    /// waiting for the node).
    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// The peer's certificate chain, end entity first (empty on a
    /// plaintext or simulated connection).
    pub(crate) fn certificates(&self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        lock(&self.certificates).clone()
    }

    /// Whether the connection is encrypted (mutual TLS).
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.load(Ordering::Acquire)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Closes the connection (both tasks end) and ends everything waiting
    /// on it.
    pub(crate) fn close(&self) {
        self.lose("closed by this node".into());
    }

    /// Loses the connection for `reason` (a revoked peer, the
    /// simulation).
    pub(crate) fn lose_for(&self, reason: String) {
        self.lose(reason);
    }

    /// Dispatches one received frame (the simulation's entry).
    #[cfg_attr(not(feature = "simulation"), allow(dead_code))]
    pub(crate) fn dispatch_frame(self: &Arc<Self>, frame: Frame) {
        self.dispatch(frame);
    }

    /// Moves what is queued (control first) into `into`, as the writer
    /// does before a write.
    #[cfg_attr(not(feature = "simulation"), allow(dead_code))]
    pub(crate) fn take_outbound(&self, into: &mut BytesMut) {
        let mut out = lock(&self.out);
        into.extend_from_slice(&out.control);
        into.extend_from_slice(&out.user);
        out.control.clear();
        out.user.clear();
        let frames = std::mem::take(&mut out.frames);
        drop(out);
        self.link.traffic.sent.add(into.len() as u64, frames);
        self.room.notify_waiters();
    }

    fn lose(&self, reason: String) {
        if self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared
            .stats
            .connections_lost
            .fetch_add(1, Ordering::Relaxed);
        self.closed.notify_waiters();
        self.wake_writer.notify_one();
        self.room.notify_waiters();
        self.shared.forget(self);
        // Dropping each pending reply ends its ask with `ConnectionLost`.
        // Each in the order it was made, not a hash map's: what the actors
        // here are told, and when, is then the same on every run (a seed
        // replays a simulation).
        let pending = std::mem::take(&mut *lock(&self.pending));
        for (_, finish) in by_key(pending) {
            finish(Err(AskError::ConnectionLost), 0);
        }
        for (_, tx) in by_key(std::mem::take(&mut *lock(&self.lookups))) {
            let _ = tx.send(Err(format!("the connection was lost: {reason}")));
        }
        drop(std::mem::take(&mut *lock(&self.proxies)));
        let crossing = std::mem::take(&mut *lock(&self.crossing));
        for (_, (target, watch)) in by_key(crossing.watches) {
            if let Some(id) = ActorId::on(&self.node, target) {
                watch.notify(id, ExitReason::NoConnection);
            }
        }
        for ((_, remote), local) in by_key(crossing.links_out) {
            if let Some(id) = ActorId::on(&self.node, remote) {
                local.exit(id, ExitReason::NoConnection);
            }
        }
        for ((remote, _), local) in by_key(crossing.links_in) {
            if let Some(id) = ActorId::on(&self.node, remote) {
                local.exit(id, ExitReason::NoConnection);
            }
        }
        for ((watch, _), local) in by_key(crossing.monitors_in) {
            if let Some(id) = ActorId::on(&self.node, watch) {
                local.unmonitor(id);
            }
        }
    }

    // ---- sending ---------------------------------------------------------

    fn queue_control(&self, control: &Control) {
        let mut out = lock(&self.out);
        let limits = self.shared.limits;
        let header = Header::control(wire::CONTROL, 0, 0);
        if encode_frame_with(&mut out.control, &header, &limits, |b, max| {
            serialize_into(b, control, max)
        })
        .is_ok()
        {
            out.frames += 1;
            drop(out);
            self.wake_writer.notify_one();
        }
    }

    /// Queues bytes for a control channel (`channel.rs`).
    pub(crate) fn queue_extension(&self, channel: u64, payload: &[u8]) {
        self.queue_control(&Control::Extension {
            channel,
            payload: payload.to_vec(),
        });
    }

    /// Queues an ordered system frame (a `Down` or a link's exit); never
    /// refused for room, like a local system message.
    fn queue_system<T: serde::Serialize>(&self, code: u64, receiver: u64, value: &T) {
        let limits = self.shared.limits;
        let mut out = lock(&self.out);
        let header = Header::message(code, 0, receiver);
        let ok = encode_frame_with(&mut out.user, &header, &limits, |b, max| {
            serialize_into(b, value, max)
        })
        .is_ok();
        out.frames += u64::from(ok);
        drop(out);
        if ok {
            self.wake_writer.notify_one();
        }
    }

    fn queue_reply(&self, request: u64, outcome: crate::messages::Answer) {
        if self.is_lost() {
            return;
        }
        let limits = self.shared.limits;
        let (code, payload) = match outcome {
            Ok(bytes) => (reply::OK, bytes),
            Err((code, reason)) => (code, reason.into_bytes()),
        };
        let header = Header {
            lane: Lane::User,
            kind: Kind::Reply,
            code,
            sender: request,
            receiver: 0,
        };
        let mut out = lock(&self.out);
        let written = encode_frame_with(&mut out.user, &header, &limits, |b, max| {
            if payload.len() > max {
                return Err(crate::frame::EncodeError::TooLong {
                    lane: Lane::Large,
                    len: payload.len(),
                    cap: max as u32,
                });
            }
            b.extend_from_slice(&payload);
            Ok(())
        });
        if written.is_err() {
            let header = Header {
                code: reply::UNENCODABLE,
                ..header
            };
            let _ = encode_frame(
                &mut out.user,
                &header,
                b"the reply is over the frame cap",
                &limits,
            );
        }
        out.frames += 1;
        let queued = out.user.len();
        drop(out);
        // Usually on the thread of the actor that replied (see
        // `inline_task.rs`): it leaves when that turn ends.
        self.flush_soon(true, queued);
    }

    /// Gets what was just queued written soon, without a thread hand-off
    /// where possible:
    ///
    /// * on an actor's worker, when the turn ends: everything the turn
    ///   sent to this node leaves in one write, from that worker;
    /// * elsewhere, when someone waits for the answer (`urgent`: an ask,
    ///   an answer), written now on the calling thread if the stream is
    ///   free;
    /// * else by the writer task, which takes whatever else was queued by
    ///   then in the same write.
    ///
    /// What the socket does not take at once is left to the writer task.
    /// `queued`: the user buffer's length after what was just queued.
    fn flush_soon(&self, urgent: bool, queued: usize) {
        if self.shared.simulated {
            self.wake_writer.notify_one();
        } else if troubadour::remote::at_turn_end(&self.flush) {
            // A turn that queues a write's worth does not wait for its end.
            if queued >= FLUSH_AT {
                self.write_through();
            }
        } else if urgent {
            // Whatever this write leaves, or finds another writer busy
            // with, that writer's `done_writing` hands to the writer task.
            self.write_through();
        } else {
            self.wake_writer.notify_one();
        }
    }

    /// Takes everything queued, leftover first, if nobody is writing;
    /// the caller then owns the stream's write side until it calls
    /// `done_writing`.
    fn take_for_writing(&self, into: &mut BytesMut) -> bool {
        let mut out = lock(&self.out);
        let empty = out.leftover.is_empty()
            && out.control.is_empty()
            && out.user.is_empty()
            && !out.needs_flush;
        if out.writing || empty {
            return false;
        }
        out.writing = true;
        out.needs_flush = false;
        into.extend_from_slice(&out.leftover);
        into.extend_from_slice(&out.control);
        into.extend_from_slice(&out.user);
        out.leftover.clear();
        out.control.clear();
        out.user.clear();
        let frames = std::mem::take(&mut out.frames);
        drop(out);
        // Bytes are counted as the socket takes them, frames here.
        self.link.traffic.sent.add(0, frames);
        // Room again for senders waiting in `send().await`.
        self.room.notify_waiters();
        true
    }

    /// Ends a write: `unwritten` goes first next time; wakes the writer task
    /// if anything is left to do.
    fn done_writing(&self, unwritten: &[u8], needs_flush: bool) {
        let mut out = lock(&self.out);
        out.leftover.extend_from_slice(unwritten);
        out.needs_flush |= needs_flush;
        out.writing = false;
        let more = !out.leftover.is_empty()
            || !out.control.is_empty()
            || !out.user.is_empty()
            || out.needs_flush;
        drop(out);
        if more {
            self.wake_writer.notify_one();
        }
    }

    /// Writes what is queued on the calling thread, if nobody is writing
    /// and the socket takes it without waiting: a message then leaves
    /// without waking the writer task (one thread hand-off less on each
    /// side of a round trip). Whatever the socket does not take at once
    /// is left to the writer task, first in line.
    ///
    /// Polling with a waker that does nothing is safe here: a `Pending`
    /// hands the rest to the writer task, whose next poll registers its
    /// own waker again.
    fn write_through(&self) {
        if self.shared.simulated || self.is_lost() {
            return;
        }
        // A buffer per thread, kept between writes: a fresh one per write
        // was an allocation of the whole batch each time (and, with
        // glibc's allocator, a consolidation of its free lists).
        thread_local! {
            static BATCH: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
        }
        BATCH.with(|batch| match batch.try_borrow_mut() {
            Ok(mut batch) => {
                batch.clear();
                self.write_batch(&mut batch);
                if batch.capacity() > KEPT_BATCH {
                    *batch = BytesMut::new();
                }
            }
            Err(_) => self.write_batch(&mut BytesMut::new()),
        });
    }

    fn write_batch(&self, batch: &mut BytesMut) {
        if !self.take_for_writing(batch) {
            return;
        }
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut pos = 0;
        let mut flushed = false;
        if let Ok(mut writer) = self.writer.try_lock() {
            if let Some(stream) = writer.as_mut() {
                while pos < batch.len() {
                    match std::pin::Pin::new(&mut *stream).poll_write(&mut cx, &batch[pos..]) {
                        std::task::Poll::Ready(Ok(n)) if n > 0 => pos += n,
                        // An error or a closed stream is the writer
                        // task's to report.
                        _ => break,
                    }
                }
                if pos == batch.len() {
                    flushed = matches!(
                        std::pin::Pin::new(&mut *stream).poll_flush(&mut cx),
                        std::task::Poll::Ready(Ok(()))
                    );
                }
            }
        }
        self.link.traffic.sent.add(pos as u64, 0);
        self.done_writing(&batch[pos..], !flushed);
    }

    async fn write_loop(self: Arc<Self>) -> String {
        let mut batch = BytesMut::with_capacity(64 * 1024);
        let heartbeat = self.shared.config.heartbeat_interval;
        loop {
            if self.is_lost() {
                let writer = lock(&self.writer).take();
                if let Some(mut w) = writer {
                    let _ = w.shutdown().await;
                }
                return "closed".into();
            }
            batch.clear();
            if !self.take_for_writing(&mut batch) {
                tokio::select! {
                    _ = self.wake_writer.notified() => {}
                    _ = tokio::time::sleep(heartbeat) => {
                        self.queue_control(&Control::Heartbeat);
                    }
                }
                continue;
            }
            let written = self.write_all(&batch).await;
            self.done_writing(&[], false);
            if let Err(e) = written {
                return format!("write failed: {e}");
            }
        }
    }

    /// Writes `buf` and flushes, holding the write side only during each
    /// poll.
    async fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut pos = 0;
        while pos < buf.len() {
            let n = std::future::poll_fn(|cx| match lock(&self.writer).as_mut() {
                Some(w) => std::pin::Pin::new(w).poll_write(cx, &buf[pos..]),
                None => std::task::Poll::Ready(Err(std::io::ErrorKind::NotConnected.into())),
            })
            .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            pos += n;
            self.link.traffic.sent.add(n as u64, 0);
        }
        std::future::poll_fn(|cx| match lock(&self.writer).as_mut() {
            Some(w) => std::pin::Pin::new(w).poll_flush(cx),
            None => std::task::Poll::Ready(Err(std::io::ErrorKind::NotConnected.into())),
        })
        .await
    }

    // ---- receiving -------------------------------------------------------

    async fn read_loop(
        self: Arc<Self>,
        mut reader: tokio::io::ReadHalf<Stream>,
        mut decoder: FrameDecoder,
    ) -> String {
        let silence = self.shared.config.heartbeat_timeout;
        let codec = self.codec();
        let runner = self
            .shared
            .config
            .turns_on_io_thread
            .then(|| ArrivalRunner::start(&self.shared.runtime))
            .flatten();
        loop {
            // References inside what arrived resolve against this peer.
            let mut dispatch_all = || {
                // Counted once per read, not per frame.
                let mut frames = 0;
                let framing = with_ref_codec(&codec, || loop {
                    match decoder.decode() {
                        Ok(Some(frame)) => {
                            frames += 1;
                            self.dispatch(frame);
                        }
                        Ok(None) => return None,
                        Err(e) => return Some(e),
                    }
                });
                self.link.traffic.received.add(0, frames);
                framing
            };
            let framing = match &runner {
                Some(runner) => runner.deliver(dispatch_all),
                None => dispatch_all(),
            };
            if let Some(e) = framing {
                self.shared
                    .stats
                    .framing_errors
                    .fetch_add(1, Ordering::Relaxed);
                return format!("framing error: {e}");
            }
            let buf = decoder.buffer_mut();
            buf.reserve(64 * 1024);
            tokio::select! {
                read = tokio::time::timeout(silence, reader.read_buf(buf)) => match read {
                    Ok(Ok(0)) => return "the peer closed the connection".into(),
                    Ok(Ok(n)) => self.link.traffic.received.add(n as u64, 0),
                    Ok(Err(e)) => return format!("read failed: {e}"),
                    Err(_) => return format!("nothing heard for {silence:?} (heartbeat timeout)"),
                },
                _ = self.closed.notified() => return "closed".into(),
            }
        }
    }

    fn dispatch(self: &Arc<Self>, frame: Frame) {
        let h = frame.header;
        match h.kind {
            Kind::Message if h.code == wire::SYSTEM_DOWN => {
                self.on_down(h.receiver, &frame.payload)
            }
            Kind::Message if h.code == wire::SYSTEM_EXIT => {
                self.on_exit(h.receiver, &frame.payload)
            }
            Kind::Message if h.code == SYSTEM_TRACE => {
                let trace = TraceContext::from_bytes(&frame.payload);
                self.traced.store(trace.is_some(), Ordering::Relaxed);
                *lock(&self.incoming_trace) = trace;
            }
            Kind::Message => {
                let trace = self.take_trace();
                self.on_message(h.code, h.receiver, &frame.payload, None, trace)
            }
            Kind::Ask => {
                let trace = self.take_trace();
                self.on_message(h.code, h.receiver, &frame.payload, Some(h.sender), trace)
            }
            Kind::Reply => {
                let Some(finish) = lock(&self.pending).remove(&h.sender) else {
                    return; // the asker's node forgot it (the connection was renewed)
                };
                let depth = self.shared.config.max_depth;
                let reason = || String::from_utf8_lossy(&frame.payload).into_owned();
                let outcome = match h.code {
                    reply::OK => Ok(&frame.payload[..]),
                    reply::STOPPED => Err(AskError::Stopped),
                    reply::FULL => Err(AskError::Full),
                    reply::NO_REPLY => Err(AskError::NoReply),
                    reply::TIMEOUT => Err(AskError::Refused(
                        "the actor did not reply within the node's limit for remote asks".into(),
                    )),
                    reply::UNENCODABLE => Err(AskError::Unencodable(reason())),
                    _ => Err(AskError::Refused(reason())),
                };
                finish(outcome, depth);
            }
            Kind::Control if h.code == wire::CONTROL => {
                match decode_payload::<Control>(&frame.payload, self.shared.config.max_depth) {
                    Ok(c) => self.on_control(c),
                    Err(_) => {
                        self.shared
                            .stats
                            .undecodable
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // A handshake or verdict after the handshake, or an unknown
            // control code: nothing to do with it.
            _ => {}
        }
    }

    /// The trace context sent just before the message being dispatched.
    fn take_trace(&self) -> Option<TraceContext> {
        // A plain load (no locked instruction) on the common path.
        if !self.traced.load(Ordering::Relaxed) {
            return None;
        }
        self.traced.store(false, Ordering::Relaxed);
        lock(&self.incoming_trace).take()
    }

    fn on_message(
        self: &Arc<Self>,
        code: u64,
        receiver: u64,
        payload: &[u8],
        ask: Option<u64>,
        trace: Option<TraceContext>,
    ) {
        let stats = &self.shared.stats;
        let export = self.shared.export(receiver);
        let refuse = |code: u64, reason: String| {
            if let Some(request) = ask {
                self.queue_reply(request, Err((code, reason)));
            }
        };
        let Some(export) = export else {
            stats.no_such_actor.fetch_add(1, Ordering::Relaxed);
            refuse(reply::STOPPED, String::new());
            return;
        };
        let Some(accepted) = export.handlers.get(&code) else {
            stats.unknown_type.fetch_add(1, Ordering::Relaxed);
            refuse(
                reply::REFUSED,
                format!(
                    "the actor type {} does not accept the message type with id {code:#018x}",
                    export.actor_type.unwrap_or("(a recipient)")
                ),
            );
            return;
        };
        let name = accepted.name;
        let asked = ask.map(|request| {
            let peer = self.clone();
            Asked {
                answer: Box::new(move |outcome| peer.queue_reply(request, outcome)),
                limit: self.shared.config.remote_ask_limit,
                user_cap: self.shared.limits.cap(Lane::Large) as usize,
                codec: self.codec(),
                runner: self.clone(),
            }
        });
        let deliver = || {
            (accepted.deliver)(
                &*accepted.target,
                payload,
                self.shared.config.max_depth,
                asked,
            )
        };
        match trace_context::delivered_in(trace, name, &self.node, deliver) {
            Delivered::Ok => {}
            Delivered::Undecodable(e) => {
                stats.undecodable.fetch_add(1, Ordering::Relaxed);
                refuse(reply::REFUSED, format!("{name} did not decode: {e}"));
            }
            Delivered::Stopped => {
                stats.no_such_actor.fetch_add(1, Ordering::Relaxed);
                refuse(reply::STOPPED, String::new());
            }
            Delivered::DeadLetter => refuse(reply::STOPPED, String::new()),
            Delivered::Full => {
                stats.mailbox_full.fetch_add(1, Ordering::Relaxed);
                refuse(reply::FULL, String::new());
            }
        }
    }

    fn on_down(&self, watch: u64, payload: &[u8]) {
        let Ok(down) = decode_payload::<DownFrame>(payload, self.shared.config.max_depth) else {
            self.shared
                .stats
                .undecodable
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let entry = lock(&self.crossing).watches.remove(&watch);
        if let (Some((target, w)), true) = (entry, true) {
            if let Some(id) = ActorId::on(&self.node, target) {
                w.notify(id, down.reason.into());
            }
        }
    }

    fn on_exit(&self, to: u64, payload: &[u8]) {
        let Ok(exit) = decode_payload::<ExitFrame>(payload, self.shared.config.max_depth) else {
            self.shared
                .stats
                .undecodable
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(from) = ActorId::on(&self.node, exit.from) else {
            return;
        };
        let local = {
            let mut c = lock(&self.crossing);
            let a = c.links_out.remove(&(to, exit.from));
            let b = c.links_in.remove(&(exit.from, to));
            a.or(b)
        };
        if let Some(local) = local {
            local.exit(from, exit.reason.into());
        }
    }

    fn on_control(self: &Arc<Self>, control: Control) {
        let node = &self.node;
        match control {
            Control::Heartbeat => {}
            Control::Extension { channel, payload } => match self.shared.channels.get(channel) {
                Some(handler) => handler(node, &payload),
                None => {
                    self.shared
                        .stats
                        .unknown_channel
                        .fetch_add(1, Ordering::Relaxed);
                }
            },
            Control::Hello { listen } => {
                if let Some(addr) = listen.and_then(|a| a.parse().ok()) {
                    self.link.set_dial(addr);
                }
            }
            Control::Lookup {
                request,
                name,
                actor_type,
            } => {
                let answer = match self.shared.export_named(&name) {
                    None => Control::NotFound {
                        request,
                        reason: format!("no actor is exposed under the name {name:?}"),
                    },
                    Some((_, e)) if e.actor_type != Some(actor_type.as_str()) => {
                        Control::NotFound {
                            request,
                            reason: format!(
                                "the actor exposed as {name:?} is a {}, not a {actor_type}",
                                e.actor_type.unwrap_or("(recipient)")
                            ),
                        }
                    }
                    Some((serial, _)) => Control::Found { request, serial },
                };
                self.queue_control(&answer);
            }
            Control::Found { request, serial } => {
                if let Some(tx) = lock(&self.lookups).remove(&request) {
                    let _ = tx.send(Ok(serial));
                }
            }
            Control::NotFound { request, reason } => {
                if let Some(tx) = lock(&self.lookups).remove(&request) {
                    let _ = tx.send(Err(reason));
                }
            }
            Control::Link { from, to } => {
                let Some(remote_id) = ActorId::on(node, from) else {
                    return;
                };
                match self.control_of(to) {
                    Some(control) if !control.is_stopped() => {
                        let far =
                            proxy::<RemoteProcess>(&self.shared.system, remote_id, self.route());
                        lock(&self.crossing)
                            .links_in
                            .insert((from, to), control.clone());
                        control.link(ControlRef::of(&far));
                    }
                    // Linking to an actor that is gone fails the linker
                    // with `noproc`, as locally.
                    _ => self.queue_system(
                        wire::SYSTEM_EXIT,
                        from,
                        &ExitFrame {
                            from: to,
                            reason: WireReason::NoProc,
                        },
                    ),
                }
            }
            Control::Unlink { from, to } => {
                lock(&self.crossing).links_in.remove(&(from, to));
                if let (Some(c), Some(id)) = (self.control_of(to), ActorId::on(node, from)) {
                    c.unlink(id);
                }
            }
            Control::Monitor { watch, target } => {
                let Some(watcher) = ActorId::on(node, watch) else {
                    return;
                };
                match self.control_of(target) {
                    Some(control) => {
                        let far =
                            proxy::<RemoteProcess>(&self.shared.system, watcher, self.route());
                        lock(&self.crossing)
                            .monitors_in
                            .insert((watch, target), control.clone());
                        control.monitor(watcher, far.recipient::<Down, Immediate>());
                    }
                    None => self.queue_system(
                        wire::SYSTEM_DOWN,
                        watch,
                        &DownFrame {
                            target,
                            reason: WireReason::NoProc,
                        },
                    ),
                }
            }
            Control::Demonitor { watch, target } => {
                lock(&self.crossing).monitors_in.remove(&(watch, target));
                if let (Some(c), Some(id)) = (self.control_of(target), ActorId::on(node, watch)) {
                    c.unmonitor(id);
                }
            }
            Control::RequestStop { to } => {
                if let Some(c) = self.control_of(to) {
                    c.request_stop();
                }
            }
            Control::Stop { to, reason } => {
                if let Some(c) = self.control_of(to) {
                    c.stop(reason.into());
                }
            }
            Control::Kill { to } => {
                if let Some(c) = self.control_of(to) {
                    c.kill();
                }
            }
            Control::StopGracefully { to } => {
                if let Some(stop) = self
                    .shared
                    .export(to)
                    .and_then(|e| e.stop_gracefully.clone())
                {
                    stop();
                }
            }
        }
    }

    /// The control face of exported actor `serial`.
    fn control_of(&self, serial: u64) -> Option<ControlRef> {
        self.shared.export(serial).and_then(|e| e.control.clone())
    }

    /// This connection's reference codec (references in messages).
    pub(crate) fn codec(self: &Arc<Self>) -> Arc<dyn RefCodec> {
        self.clone()
    }

    // ---- lookups ---------------------------------------------------------

    /// Asks the peer which actor it exposes under `name`.
    pub(crate) async fn lookup(
        &self,
        name: &str,
        actor_type: &str,
        timeout: Duration,
    ) -> Result<u64, String> {
        let (tx, rx) = oneshot::channel();
        let request = {
            let mut out = lock(&self.out);
            let r = out.next_request;
            out.next_request += 1;
            r
        };
        lock(&self.lookups).insert(request, tx);
        if self.is_lost() {
            lock(&self.lookups).remove(&request);
            return Err("the connection was lost".into());
        }
        self.queue_control(&Control::Lookup {
            request,
            name: name.to_string(),
            actor_type: actor_type.to_string(),
        });
        if timeout == Duration::MAX {
            return match rx.await {
                Ok(answer) => answer,
                Err(_) => Err("the connection was lost".into()),
            };
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the connection was lost".into()),
            Err(_) => {
                lock(&self.lookups).remove(&request);
                Err(format!("no answer within {timeout:?}"))
            }
        }
    }

    pub(crate) fn route(&self) -> Arc<dyn Route> {
        self.link.route()
    }
}

impl Peer {
    /// A message for one of the node's actors (see `link.rs`'s route).
    pub(crate) fn send_message(
        self: &Arc<Self>,
        message: &mut Outgoing<'_>,
    ) -> Result<(), Refusal> {
        let peer = self;
        if peer.is_lost() {
            return Err(Refusal::Stopped);
        }
        let to = message.to().serial();
        if let Some(down) = message.message::<Down>() {
            // A local actor monitored by the peer ended: the proxy is the
            // remote watcher, its serial the watch's number.
            peer.queue_system(
                wire::SYSTEM_DOWN,
                to,
                &DownFrame {
                    target: down.id.serial(),
                    reason: (&down.reason).into(),
                },
            );
            return Ok(());
        }
        let shared = &peer.shared;
        let encoder = *shared
            .encoders
            .get(message.message_type_id())
            .ok_or(Refusal::Unregistered)?;
        let limits = shared.limits;
        let mut out = lock(&peer.out);
        if out.user.len() >= shared.config.outbound_queue_bytes && !message.is_system_message() {
            return Err(Refusal::Full);
        }
        let ask = message.is_ask();
        let request = ask.then(|| {
            let r = out.next_request;
            out.next_request += 1;
            r
        });
        let codec = peer.codec();
        let before = (out.user.len(), out.frames);
        if let Some(trace) = trace_context::current() {
            let header = Header::message(SYSTEM_TRACE, 0, 0);
            if encode_frame(&mut out.user, &header, &trace.to_bytes(), &limits).is_ok() {
                out.frames += 1;
            }
        }
        let pending = match with_ref_codec(&codec, || {
            (encoder.encode)(message, &mut out.user, to, request, &limits)
        }) {
            Ok(pending) => pending,
            Err(refused) => {
                // Nothing of it stays queued, its trace context included.
                out.user.truncate(before.0);
                out.frames = before.1;
                return Err(refused);
            }
        };
        out.frames += 1;
        if let (Some(request), Some(pending)) = (request, pending) {
            // Registered before the lock is released, so before the writer
            // can send the request, so before any reply can come.
            lock(&peer.pending).insert(request, pending);
        }
        let queued = out.user.len();
        drop(out);
        peer.flush_soon(ask, queued);
        Ok(())
    }

    /// A signal for one of the node's actors.
    pub(crate) fn send_signal(&self, to: ActorId, signal: OutgoingSignal) {
        let peer = self;
        let to_serial = to.serial();
        if peer.is_lost() {
            match signal {
                OutgoingSignal::Link(local) => local.exit(to, ExitReason::NoConnection),
                OutgoingSignal::Monitor(w) => w.notify(to, ExitReason::NoConnection),
                _ => {}
            }
            return;
        }
        let control = match signal {
            OutgoingSignal::RequestStop => Control::RequestStop { to: to_serial },
            OutgoingSignal::Stop(reason) => Control::Stop {
                to: to_serial,
                reason: (&reason).into(),
            },
            OutgoingSignal::Kill => Control::Kill { to: to_serial },
            OutgoingSignal::StopGracefully => Control::StopGracefully { to: to_serial },
            OutgoingSignal::Exit { from, reason } => {
                {
                    let mut c = lock(&peer.crossing);
                    c.links_out.remove(&(from.serial(), to_serial));
                    c.links_in.remove(&(to_serial, from.serial()));
                }
                peer.queue_system(
                    wire::SYSTEM_EXIT,
                    to_serial,
                    &ExitFrame {
                        from: from.serial(),
                        reason: (&reason).into(),
                    },
                );
                return;
            }
            OutgoingSignal::Link(local) => {
                let from = local.id().serial();
                lock(&peer.crossing)
                    .links_out
                    .insert((from, to_serial), local);
                Control::Link {
                    from,
                    to: to_serial,
                }
            }
            OutgoingSignal::Unlink(from) => {
                lock(&peer.crossing)
                    .links_out
                    .remove(&(from.serial(), to_serial));
                Control::Unlink {
                    from: from.serial(),
                    to: to_serial,
                }
            }
            OutgoingSignal::Monitor(watch) => {
                let mut c = lock(&peer.crossing);
                let number = c.next_watch;
                c.next_watch += 1;
                c.watches.insert(number, (to_serial, watch));
                Control::Monitor {
                    watch: number,
                    target: to_serial,
                }
            }
            OutgoingSignal::Unwatch(watcher) => {
                let numbers: Vec<u64> = {
                    let mut c = lock(&peer.crossing);
                    let mut numbers: Vec<u64> = c
                        .watches
                        .iter()
                        .filter(|(_, (t, w))| *t == to_serial && w.watcher() == Some(watcher))
                        .map(|(n, _)| *n)
                        .collect();
                    numbers.sort_unstable();
                    for n in &numbers {
                        c.watches.remove(n);
                    }
                    numbers
                };
                for watch in numbers {
                    peer.queue_control(&Control::Demonitor {
                        watch,
                        target: to_serial,
                    });
                }
                return;
            }
            _ => return,
        };
        peer.queue_control(&control);
    }

    /// Resolves when the outbound buffer may have room again.
    pub(crate) async fn room(&self) {
        let notified = self.room.notified();
        let full = lock(&self.out).user.len() >= self.shared.config.outbound_queue_bytes;
        if full && !self.is_lost() {
            notified.await;
        }
    }
}

/// The most proxies one connection keeps for references it decodes.
const PROXY_CACHE: usize = 4096;

impl Peer {
    /// Whether `wire` names an actor of the node at the other end.
    fn names_peer(&self, wire: &WireRef<'_>) -> bool {
        wire.node == self.node.name() && wire.incarnation == self.node.incarnation()
    }
}

impl RefCodec for Peer {
    fn encode(&self, target: RefTarget<'_>) -> Result<WireRef<'_>, String> {
        self.shared
            .encode_ref(target)
            .inspect_err(|e| crate::messages::note_ref_error(e))
    }

    fn known(
        &self,
        wire: &WireRef<'_>,
        want: std::any::TypeId,
    ) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        if !self.names_peer(wire) {
            return None;
        }
        lock(&self.proxies).get(&(wire.serial, want)).cloned()
    }

    fn remember(
        &self,
        wire: &WireRef<'_>,
        want: std::any::TypeId,
        made: Arc<dyn std::any::Any + Send + Sync>,
    ) {
        if !self.names_peer(wire) {
            return;
        }
        let mut proxies = lock(&self.proxies);
        // Checked under the lock `lose` empties the table under.
        if self.is_lost() {
            return;
        }
        let evicted = if proxies.len() >= PROXY_CACHE {
            std::mem::take(&mut *proxies)
        } else {
            HashMap::new()
        };
        proxies.insert((wire.serial, want), made);
        drop(proxies);
        drop(evicted);
    }

    fn decode(&self, wire: &WireRef<'_>, want: std::any::TypeId) -> Result<Resolved, String> {
        self.shared
            .resolve_ref(wire, want, &self.link)
            .inspect_err(|e| crate::messages::note_ref_error(e))
    }

    fn system(&self) -> &troubadour::SystemHandle {
        &self.shared.system
    }
}

/// A turn's queued bytes reach the socket when the turn ends.
const FLUSH_AT: usize = 64 * 1024;

/// The most a thread's write buffer keeps between writes (a large message
/// grows it once; it is not kept at that size).
const KEPT_BATCH: usize = 256 * 1024;

/// [`Peer`]'s flush at the end of an actor turn; weak, so a deferred flush
/// does not keep a closed connection alive.
struct TurnEndFlush(std::sync::Weak<Peer>);

impl TurnEnd for TurnEndFlush {
    fn turn_ended(&self) {
        if let Some(peer) = self.0.upgrade() {
            peer.write_through();
        }
    }
}

impl crate::messages::AnswerRunner for Peer {
    fn run(&self, answer: crate::messages::AnswerFuture) {
        match &self.answers {
            // A simulation awaits answers in its own loop, on its thread.
            Some(answers) => lock(answers).push(answer),
            // On the thread that completes the local reply: the answer
            // leaves from the replying actor's thread (`inline_task.rs`).
            None => crate::inline_task::InlineTask::start(answer),
        }
    }
}

/// `map`'s entries by key: the order they were numbered in, the same on
/// every run, where a hash map's iteration order is not.
fn by_key<K: Ord, V>(map: HashMap<K, V>) -> Vec<(K, V)> {
    let mut entries: Vec<(K, V)> = map.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries
}
