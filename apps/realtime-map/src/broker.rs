//! The embedded MQTT broker (rumqttd), so that one command runs the whole
//! service on a machine with nothing else installed.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};

/// Why the embedded broker did not start.
#[derive(Debug)]
pub enum BrokerError {
    /// The address is taken or not ours to listen on.
    Bind(SocketAddr, std::io::Error),
    /// The broker's thread could not be started.
    Thread(std::io::Error),
}

impl std::fmt::Display for BrokerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BrokerError::Bind(addr, e) => write!(
                f,
                "cannot listen for MQTT on {addr}: {e}; pick another address with --broker-listen, or use an external broker with --mqtt"
            ),
            BrokerError::Thread(e) => write!(f, "cannot start the MQTT broker's thread: {e}"),
        }
    }
}

impl std::error::Error for BrokerError {}

/// Starts a broker on `listen` (port 0 picks a free port) and returns the
/// address it will accept connections on. The broker runs on its own threads
/// until the process exits.
pub fn start(listen: SocketAddr) -> Result<SocketAddr, BrokerError> {
    // rumqttd logs a bind failure on its own thread and carries on; find out
    // here instead, and resolve port 0 to a real port.
    let probe = TcpListener::bind(listen).map_err(|e| BrokerError::Bind(listen, e))?;
    let addr = probe
        .local_addr()
        .map_err(|e| BrokerError::Bind(listen, e))?;
    drop(probe);

    let connections = rumqttd::ConnectionSettings {
        connection_timeout_ms: 60_000,
        max_payload_size: 64 * 1024,
        max_inflight_count: 500,
        auth: None,
        external_auth: None,
        dynamic_filters: true,
    };
    let server = rumqttd::ServerSettings {
        name: "v4".into(),
        listen: addr,
        tls: None,
        next_connection_delay_ms: 1,
        connections,
    };
    let config = rumqttd::Config {
        id: 0,
        router: rumqttd::RouterConfig {
            max_connections: 10_010,
            max_outgoing_packet_count: 200,
            max_segment_size: 100 * 1024 * 1024,
            max_segment_count: 10,
            ..Default::default()
        },
        v4: Some(HashMap::from([("v4".to_string(), server)])),
        ..Default::default()
    };
    std::thread::Builder::new()
        .name("mqtt-broker".into())
        .spawn(move || {
            let mut broker = rumqttd::Broker::new(config);
            if let Err(e) = broker.start() {
                tracing::error!("embedded MQTT broker stopped: {e}");
            }
        })
        .map_err(BrokerError::Thread)?;

    // The broker binds on its thread within moments; clients connecting
    // before that retry quickly (see `ingest::poll_until_stopped`).
    Ok(addr)
}
