//! Positions in: an MQTT subscription whose messages become [`Position`]s
//! handed on (to the fleet, or in a cluster to each vehicle's owner) in
//! the order the broker delivers them.

use crate::fleet::Fleet;
use crate::hfp::{self, Position, TOPIC_FILTER};
use crate::metrics::Metrics;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use troubadour::ActorRef;

/// An `mqtt://host:port` address that could not be used.
#[derive(Debug, Clone, PartialEq)]
pub struct BadMqttUrl(pub String);

impl std::fmt::Display for BadMqttUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is not an MQTT address; expected mqtt://host:port (for example mqtt://127.0.0.1:1883)",
            self.0
        )
    }
}

impl std::error::Error for BadMqttUrl {}

/// Where a broker is.
#[derive(Debug, Clone, PartialEq)]
pub struct Broker {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl std::str::FromStr for Broker {
    type Err = BadMqttUrl;

    /// ```
    /// use realtime_map::ingest::Broker;
    /// let b: Broker = "mqtt://localhost:1884".parse().unwrap();
    /// assert_eq!((b.host.as_str(), b.port), ("localhost", 1884));
    /// assert_eq!("mqtt://10.0.0.1".parse::<Broker>().unwrap().port, 1883);
    /// assert!("http://x:1".parse::<Broker>().is_err());
    /// ```
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let bad = || BadMqttUrl(url.to_string());
        let rest = url
            .strip_prefix("mqtt://")
            .or_else(|| url.strip_prefix("tcp://"))
            .ok_or_else(bad)?;
        let rest = rest.trim_end_matches('/');
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().map_err(|_| bad())?),
            None => (rest, 1883),
        };
        if host.is_empty() || host.contains('/') {
            return Err(bad());
        }
        Ok(Broker {
            host: host.trim_matches(['[', ']']).to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mqtt://{}:{}", self.host, self.port)
    }
}

/// A client of `broker` named `client_id`, with its event loop.
pub fn client(broker: &Broker, client_id: &str) -> (AsyncClient, EventLoop) {
    let mut options = MqttOptions::new(client_id, broker.host.clone(), broker.port);
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(256 * 1024, 256 * 1024);
    AsyncClient::new(options, 4_096)
}

/// Reconnection pacing: quick retries at first (an embedded broker may be
/// a moment from listening), then once a second. Errors are logged only
/// once they persist.
struct Backoff {
    failing_since: Option<Instant>,
}

impl Backoff {
    /// No failure yet.
    fn new() -> Self {
        Backoff {
            failing_since: None,
        }
    }

    /// The connection works.
    fn succeeded(&mut self) {
        self.failing_since = None;
    }

    /// The connection failed with `error`: how long to wait before retrying.
    pub fn failed(
        &mut self,
        who: &str,
        broker: &Broker,
        error: &dyn std::fmt::Display,
    ) -> Duration {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_secs(2) {
            tracing::debug!("{who}: MQTT connection to {broker}: {error}; retrying");
            Duration::from_millis(50)
        } else {
            tracing::warn!("{who}: MQTT connection to {broker}: {error}; retrying in 1 s");
            Duration::from_secs(1)
        }
    }
}

/// Logs at most one malformed payload per second, with how many were
/// skipped, so a broken publisher cannot flood the log.
struct MalformedLog {
    last: Option<Instant>,
    skipped: u64,
}

impl MalformedLog {
    fn report(&mut self, topic: &str, why: &hfp::Malformed) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            self.skipped += 1;
            return;
        }
        let skipped = std::mem::take(&mut self.skipped);
        tracing::warn!(
            "malformed payload on {topic}: {why} ({skipped} more not logged since the last one)"
        );
        self.last = Some(Instant::now());
    }
}

/// The subscription: every vehicle position, or a share of them.
#[derive(Clone, Debug, PartialEq)]
pub enum Subscription {
    /// Every position, to this process alone.
    All,
    /// An MQTT shared subscription (`$share/<group>/…`): the broker hands
    /// each position to one of the group's subscribers, so the nodes of a
    /// cluster split the feed between them, and a node that disconnects
    /// (or dies) drops out of the rotation.
    Shared(String),
}

impl Subscription {
    /// The topic filter to subscribe with.
    pub fn filter(&self) -> String {
        match self {
            Subscription::All => TOPIC_FILTER.to_string(),
            Subscription::Shared(group) => format!("$share/{group}/{TOPIC_FILTER}"),
        }
    }
}

/// Subscribes to vehicle positions on `broker` (`subscription` says which)
/// and hands each to `deliver`, until `stop` turns true. `subscribed`
/// fires on the first subscription acknowledgement. Reconnects on its own
/// after errors.
pub async fn run(
    broker: Broker,
    subscription: Subscription,
    mut deliver: impl FnMut(Position) + Send,
    metrics: Arc<Metrics>,
    subscribed: oneshot::Sender<()>,
    stop: watch::Receiver<bool>,
) {
    let id = format!("realtime-map-{}", std::process::id());
    let filter = subscription.filter();
    let (client, events) = client(&broker, &id);
    let mut subscribed = Some(subscribed);
    let mut log = MalformedLog {
        last: None,
        skipped: 0,
    };
    poll_until_stopped(events, &broker, "subscriber", stop, |event| match event {
        Event::Incoming(Packet::Publish(p)) => match hfp::parse(&p.payload) {
            Ok(position) => {
                metrics.positions_received.fetch_add(1, Relaxed);
                deliver(position)
            }
            Err(why) => {
                metrics.malformed.fetch_add(1, Relaxed);
                log.report(&p.topic, &why);
            }
        },
        Event::Incoming(Packet::ConnAck(_)) => {
            // A clean session forgets subscriptions: renew on every connect.
            if let Err(e) = client.try_subscribe(filter.as_str(), QoS::AtMostOnce) {
                tracing::error!("cannot subscribe to {filter}: {e}");
            }
        }
        Event::Incoming(Packet::SubAck(_)) => {
            tracing::info!("subscribed to {filter} on {broker}");
            if let Some(tx) = subscribed.take() {
                let _ = tx.send(());
            }
        }
        _ => {}
    })
    .await;
    let _ = client.try_disconnect();
}

/// Polls a client's connection until `stop` turns true, handing every event
/// to `on_event`; after an error, reconnects: quickly at first, then once a
/// second, logging only errors that persist. `who` names
/// the client in the log.
pub async fn poll_until_stopped(
    mut events: EventLoop,
    broker: &Broker,
    who: &str,
    mut stop: watch::Receiver<bool>,
    mut on_event: impl FnMut(Event),
) {
    let mut backoff = Backoff::new();
    loop {
        let event = tokio::select! {
            e = events.poll() => e,
            _ = stop.changed() => return,
        };
        match event {
            Ok(event) => {
                if let Event::Incoming(Packet::ConnAck(_)) = event {
                    backoff.succeeded();
                }
                on_event(event);
            }
            Err(e) => {
                let wait = backoff.failed(who, broker, &e);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// Hands `position` to the fleet of a single-process service.
pub fn to_fleet(fleet: &ActorRef<Fleet>, metrics: &Metrics, position: Position) {
    if fleet.tell(position).is_err() {
        // The fleet is gone only while shutting down.
        metrics.positions_routed.fetch_add(1, Relaxed);
        metrics.positions_handled.fetch_add(1, Relaxed);
    }
}
