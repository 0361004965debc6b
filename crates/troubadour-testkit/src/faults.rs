//! Fault injection: what can go wrong at a message's delivery, chosen by
//! the test ([`Simulation::inject`](crate::Simulation::inject)) or by the
//! seed ([`Faults`]).
//!
//! Every fault happens at a message, which pins it to a point in the
//! receiver's history: "the actor panics when it reaches this message"
//! replays exactly, where "the actor panics at some moment" would not. The
//! decisions are made on [`InFlight`] values, the same hook a network layer
//! feeds; partitions and duplicates will be added there for remote
//! messages (duplicating needs the message's bytes).

use std::fmt;
use std::time::Duration;
use troubadour::InFlight;

/// A fault injected at one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The receiver panics when it reaches the message, as if its handler
    /// had: the message is lost, the actor fails with
    /// `ExitReason::Panicked` and its supervisor decides.
    Panic,
    /// The receiver stops normally just before the message, which becomes a
    /// dead letter, as does everything sent to it afterwards.
    Stop,
    /// The message (and the rest of its sender's messages to the same
    /// receiver, which may not overtake it) arrives this much later in
    /// virtual time.
    Delay(Duration),
    /// The message is lost, as a network may lose it. An `ask` for it
    /// times out. Local sends never lose messages; use this to test a
    /// protocol meant to survive a network.
    Drop,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Panic => f.write_str("panic in its handler"),
            Fault::Stop => f.write_str("receiver stopped before it"),
            Fault::Delay(d) => write!(f, "delayed {d:?}"),
            Fault::Drop => f.write_str("dropped"),
        }
    }
}

/// Which messages a plan may touch.
type Filter = Box<dyn Fn(&InFlight) -> bool>;

/// Faults the seed injects at random: each delivered message gets at most
/// one, with the given probabilities. Install with
/// [`Simulation::set_faults`](crate::Simulation::set_faults).
///
/// ```
/// use std::time::Duration;
/// use troubadour_testkit::Faults;
/// let faults = Faults::none()
///     .panic(0.01)
///     .delay(0.1, Duration::from_millis(200))
///     .only(|m| m.message_type().ends_with("Deposit"));
/// # let _ = faults;
/// ```
pub struct Faults {
    panic: f64,
    stop: f64,
    delay: f64,
    max_delay: Duration,
    drop: f64,
    filter: Option<Filter>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::none()
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("panic", &self.panic)
            .field("stop", &self.stop)
            .field("delay", &self.delay)
            .field("max_delay", &self.max_delay)
            .field("drop", &self.drop)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

impl Faults {
    /// No faults (the default).
    pub fn none() -> Self {
        Faults {
            panic: 0.0,
            stop: 0.0,
            delay: 0.0,
            max_delay: Duration::ZERO,
            drop: 0.0,
            filter: None,
        }
    }

    /// The receiver panics at a message with this probability.
    pub fn panic(mut self, probability: f64) -> Self {
        self.panic = clamp(probability);
        self
    }

    /// The receiver stops before a message with this probability.
    pub fn stop(mut self, probability: f64) -> Self {
        self.stop = clamp(probability);
        self
    }

    /// A message is delayed by up to `max` with this probability.
    pub fn delay(mut self, probability: f64, max: Duration) -> Self {
        self.delay = clamp(probability);
        self.max_delay = max;
        self
    }

    /// A message is lost with this probability (see [`Fault::Drop`]).
    pub fn drop(mut self, probability: f64) -> Self {
        self.drop = clamp(probability);
        self
    }

    /// Only messages for which `filter` is true may get a fault (say, only
    /// those to the actors under test, not to the supervisor or a probe).
    pub fn only(mut self, filter: impl Fn(&InFlight) -> bool + 'static) -> Self {
        self.filter = Some(Box::new(filter));
        self
    }

    fn is_none(&self) -> bool {
        self.panic + self.stop + self.delay + self.drop == 0.0
    }

    /// The fault for this message, drawing from `draw` (uniform `u64`s)
    /// only when some fault is possible, so a plan of none leaves the
    /// schedule of every seed as it was.
    pub(crate) fn choose(&self, m: &InFlight, draw: &mut dyn FnMut() -> u64) -> Option<Fault> {
        if self.is_none() || self.filter.as_ref().is_some_and(|f| !f(m)) {
            return None;
        }
        // 53 random bits, as a uniform float in [0, 1).
        let roll = (draw() >> 11) as f64 / (1u64 << 53) as f64;
        let mut edge = self.panic;
        if roll < edge {
            return Some(Fault::Panic);
        }
        edge += self.stop;
        if roll < edge {
            return Some(Fault::Stop);
        }
        edge += self.drop;
        if roll < edge {
            return Some(Fault::Drop);
        }
        edge += self.delay;
        if roll < edge {
            let max = self.max_delay.as_micros().max(1) as u64;
            return Some(Fault::Delay(Duration::from_micros(1 + draw() % max)));
        }
        None
    }
}

fn clamp(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

/// A fault the test asked for at the first message that matches.
pub(crate) struct Injection {
    pub(crate) fault: Fault,
    pub(crate) at: Box<dyn FnMut(&InFlight) -> bool>,
}
