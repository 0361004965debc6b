//! `realtime-map`: the live bus map service, or (`simulate`) only the
//! simulated feed, published to a broker for another service to consume.

use clap::{Parser, Subcommand};
use realtime_map::app::{self, Config, SimulatorConfig};
use realtime_map::ingest::Broker;
use realtime_map::simulator::Simulation;
use realtime_map::App;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Parser)]
#[command(
    version,
    about = "A live bus map: one troubadour actor per vehicle, positions over MQTT, answers over HTTP"
)]
struct Cli {
    /// HTTP address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Subscribe to this broker (mqtt://host:port) instead of running the embedded one.
    #[arg(long, value_name = "URL")]
    mqtt: Option<Broker>,
    /// Where the embedded broker listens (ignored with --mqtt).
    #[arg(long, default_value = "127.0.0.1:1883")]
    broker_listen: SocketAddr,
    /// Do not publish simulated buses (for a real feed on --mqtt).
    #[arg(long)]
    no_simulator: bool,
    /// Number of simulated buses.
    #[arg(long, default_value_t = 2_000)]
    vehicles: usize,
    /// Seed of the simulation (same seed, same buses).
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Passivate a vehicle after this long without a position (e.g. 60s, 500ms, 5m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    idle: Duration,
    /// Actor system worker threads (default: half the cores, at least one).
    #[arg(long)]
    workers: Option<usize>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Only publish the simulated buses to a broker, for another service to consume.
    Simulate {
        /// The broker to publish to.
        #[arg(long, value_name = "URL")]
        mqtt: Broker,
        /// Number of simulated buses.
        #[arg(long, default_value_t = 2_000)]
        vehicles: usize,
        /// Seed of the simulation.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Print the vehicle ids, one per line, and exit.
        #[arg(long)]
        print_ids: bool,
    },
}

/// `60s`, `500ms`, `5m`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. 60s, 500ms, 5m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}`; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rumqttd=warn,rumqttc=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Simulate {
            mqtt,
            vehicles,
            seed,
            print_ids,
        }) => simulate_only(mqtt, vehicles, seed, print_ids).await,
        None => serve(cli).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("realtime-map: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        listen: cli.listen,
        mqtt: cli.mqtt,
        broker_listen: cli.broker_listen,
        simulator: (!cli.no_simulator).then_some(SimulatorConfig {
            vehicles: cli.vehicles,
            seed: cli.seed,
            ..SimulatorConfig::default()
        }),
        idle: cli.idle,
        workers: cli.workers,
    };
    let app = App::start(config).await?;
    let sim = match app.vehicle_ids().len() {
        0 => "no simulator".to_string(),
        n => format!("{n} simulated buses"),
    };
    println!(
        "realtime-map: {sim}, positions from {}\nopen http://{}/  (API: /vehicle?id=<oper>/<veh>, /vehicles?bbox=minlon,minlat,maxlon,maxlat, /metrics); Ctrl-C stops",
        app.broker(),
        app.http_addr()
    );
    tokio::signal::ctrl_c().await?;
    eprintln!("realtime-map: shutting down");
    app.shutdown().await?;
    Ok(())
}

async fn simulate_only(
    broker: Broker,
    vehicles: usize,
    seed: u64,
    print_ids: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let simulation = Simulation::new(vehicles, seed);
    if print_ids {
        for id in simulation.ids() {
            println!("{id}");
        }
        return Ok(());
    }
    let (stop, stopped) = watch::channel(false);
    let tasks = app::spawn_simulator(&broker, simulation, Duration::from_secs(1), &stopped);
    println!("realtime-map: publishing {vehicles} simulated buses to {broker}; Ctrl-C stops");
    tokio::signal::ctrl_c().await?;
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 weeks").is_err());
    }
}
