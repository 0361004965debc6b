//! [`TestProbe`]: an actor a test controls, that others send to and the
//! test asserts on.

use std::fmt::Debug;
use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour::{Immediate, SpawnError};

/// Computes the reply to each message a probe receives.
type Autopilot<M> = Box<dyn FnMut(&M) -> <M as Message>::Reply + Send>;

/// The actor behind a [`TestProbe`]: it hands every message to the test and
/// answers asks with its autopilot.
pub struct ProbeActor<M: Message> {
    inbox: flume::Sender<M>,
    autopilot: Autopilot<M>,
}

impl<M: Message> Actor for ProbeActor<M> {}

impl<M: Message> Handler<M> for ProbeActor<M> {
    fn handle(&mut self, msg: M, _: &mut Context<Self>) -> M::Reply {
        let reply = (self.autopilot)(&msg);
        // The probe is gone: nobody is asserting any more.
        let _ = self.inbox.send(msg);
        reply
    }
}

/// Stands in for an actor in a test: anything with its
/// [`recipient`](Self::recipient) can send to it, and the test asserts on
/// what arrives, in order.
///
/// ```
/// use std::time::Duration;
/// use troubadour::prelude::*;
/// use troubadour_testkit::TestProbe;
///
/// #[derive(Debug, PartialEq)]
/// struct Greeting(String);
/// impl Message for Greeting { type Reply = (); }
///
/// let system = ActorSystem::new();
/// let probe = TestProbe::<Greeting>::new(&system)?;
/// probe.recipient().tell(Greeting("hello".into()))?;
/// probe.expect_msg_eq(Greeting("hello".into()), Duration::from_secs(3));
/// probe.expect_no_msg(Duration::from_millis(10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The waiting methods block the calling thread; the actors under test keep
/// running on the system's own worker threads. In a `#[tokio::test]` whose
/// actors await tokio timers or I/O, use the multi-thread flavour (or
/// [`recv`](Self::recv), which is async), so that blocking the test's
/// thread does not stall the runtime those actors await on.
///
/// Every `expect_*` method panics with what arrived instead when the
/// expectation fails, at the caller's line.
pub struct TestProbe<M: Message> {
    actor: ActorRef<ProbeActor<M>>,
    inbox: flume::Receiver<M>,
}

impl<M: Message<Reply = ()>> TestProbe<M> {
    /// A probe for a message that needs no reply.
    pub fn new(system: &SystemHandle) -> Result<Self, SpawnError> {
        Self::with_autopilot(system, |_| ())
    }
}

impl<M: Message> TestProbe<M> {
    /// A probe that answers each message, `ask`ed or told, with
    /// `autopilot(&msg)` (Akka's `setAutoPilot`), before the test sees it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troubadour::prelude::*;
    /// use troubadour_testkit::TestProbe;
    ///
    /// #[derive(Debug)]
    /// struct Price(&'static str);
    /// impl Message for Price { type Reply = u32; }
    ///
    /// let system = ActorSystem::new();
    /// let probe = TestProbe::with_autopilot(&system, |p: &Price| if p.0 == "tea" { 3 } else { 0 })?;
    /// assert_eq!(probe.recipient().ask(Price("tea")).wait()?, 3);
    /// assert_eq!(probe.expect_msg(Duration::from_secs(3)).0, "tea");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_autopilot(
        system: &SystemHandle,
        autopilot: impl FnMut(&M) -> M::Reply + Send + 'static,
    ) -> Result<Self, SpawnError> {
        let (tx, inbox) = flume::unbounded();
        let actor = system.spawn(ProbeActor {
            inbox: tx,
            autopilot: Box::new(autopilot),
        })?;
        Ok(TestProbe { actor, inbox })
    }

    /// Where others send: give this to the code under test.
    pub fn recipient(&self) -> Recipient<M> {
        self.actor.recipient::<M, Immediate>()
    }

    /// The probe's own actor, for links, monitors or an id.
    pub fn actor(&self) -> &ActorRef<ProbeActor<M>> {
        &self.actor
    }

    /// The next message, waiting up to `within`; `None` if none arrived.
    pub fn try_recv(&self, within: Duration) -> Option<M> {
        self.inbox.recv_timeout(within).ok()
    }

    /// The next message, awaiting up to `within`; `None` if none arrived.
    pub async fn recv(&self, within: Duration) -> Option<M> {
        tokio::time::timeout(within, self.inbox.recv_async())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// How many messages arrived that the test has not taken yet.
    pub fn pending(&self) -> usize {
        self.inbox.len()
    }

    fn name() -> String {
        let full = std::any::type_name::<M>();
        format!("TestProbe<{}>", full.rsplit("::").next().unwrap_or(full))
    }
}

impl<M: Message + Debug> TestProbe<M> {
    /// The next message, which must arrive within `within`.
    #[track_caller]
    pub fn expect_msg(&self, within: Duration) -> M {
        match self.try_recv(within) {
            Some(msg) => msg,
            None => panic!(
                "{}: expected a message within {within:?}, but none arrived",
                Self::name()
            ),
        }
    }

    /// The next message, which must arrive within `within` and equal
    /// `expected`.
    #[track_caller]
    pub fn expect_msg_eq(&self, expected: M, within: Duration) -> M
    where
        M: PartialEq,
    {
        let msg = self.try_recv(within).unwrap_or_else(|| {
            panic!(
                "{}: expected {expected:?} within {within:?}, but no message arrived",
                Self::name()
            )
        });
        if msg != expected {
            panic!("{}: expected {expected:?}, got {msg:?}", Self::name());
        }
        msg
    }

    /// The next message, which must arrive within `within` and satisfy
    /// `check`; `what` describes the expectation in the failure message.
    #[track_caller]
    pub fn expect_msg_matching(
        &self,
        what: &str,
        within: Duration,
        check: impl FnOnce(&M) -> bool,
    ) -> M {
        let msg = self.try_recv(within).unwrap_or_else(|| {
            panic!(
                "{}: expected a message {what} within {within:?}, but no message arrived",
                Self::name()
            )
        });
        if !check(&msg) {
            panic!("{}: expected a message {what}, got {msg:?}", Self::name());
        }
        msg
    }

    /// No message may arrive for `duration`.
    #[track_caller]
    pub fn expect_no_msg(&self, duration: Duration) {
        if let Some(msg) = self.try_recv(duration) {
            panic!(
                "{}: expected no message for {duration:?}, got {msg:?}",
                Self::name()
            );
        }
    }

    /// The next `n` messages, all within `within` (in total).
    #[track_caller]
    pub fn receive_n(&self, n: usize, within: Duration) -> Vec<M> {
        let deadline = Instant::now() + within;
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match self.inbox.recv_deadline(deadline) {
                Ok(msg) => got.push(msg),
                Err(_) => panic!(
                    "{}: expected {n} messages within {within:?}, got {}: {got:?}",
                    Self::name(),
                    got.len()
                ),
            }
        }
        got
    }

    /// Skips messages until one satisfies `wanted`, which must happen
    /// within `within`; returns it. The failure message lists what was
    /// skipped.
    #[track_caller]
    pub fn fish_for(&self, what: &str, within: Duration, mut wanted: impl FnMut(&M) -> bool) -> M {
        let deadline = Instant::now() + within;
        let mut skipped = Vec::new();
        loop {
            match self.inbox.recv_deadline(deadline) {
                Ok(msg) if wanted(&msg) => return msg,
                Ok(msg) => skipped.push(msg),
                Err(_) => panic!(
                    "{}: no message {what} within {within:?}; skipped {}: {skipped:?}",
                    Self::name(),
                    skipped.len()
                ),
            }
        }
    }
}

impl<M: Message> Drop for TestProbe<M> {
    fn drop(&mut self) {
        self.actor.stop();
    }
}
