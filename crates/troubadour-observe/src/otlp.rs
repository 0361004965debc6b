//! Spans and runtime metrics exported to an OpenTelemetry collector over
//! OTLP (HTTP, protobuf), feature `otlp`.
//!
//! Spans: [`Telemetry::layer`] is a `tracing` layer (tracing-opentelemetry)
//! that turns the spans of the application and of the runtime into
//! OpenTelemetry spans, batched to the collector. With this feature the
//! core opens a span per message handled, a child of the span the message
//! was sent in (`trace`-level spans named `handle`), and the remote layer
//! (when the feature `remote` is on too) carries the trace context to other
//! nodes: one request's spans form one tree across the cluster.
//!
//! Metrics: [`TelemetryBuilder::runtime_metrics`] exports the figures
//! `/metrics` shows in Prometheus form, under OpenTelemetry's naming
//! (`troubadour.actors.alive`, `troubadour.messages.handled`, …), read from
//! the system at each export.
//!
//! ```no_run
//! use std::time::Duration;
//! use tracing_subscriber::layer::SubscriberExt;
//! use troubadour::ActorSystem;
//! use troubadour_observe::otlp::Telemetry;
//!
//! let system = ActorSystem::builder().observe().build();
//! let telemetry = Telemetry::otlp("checkout")
//!     .endpoint("http://collector:4318")
//!     .runtime_metrics(system.handle(), Duration::from_secs(15))
//!     .build()
//!     .expect("the exporter starts");
//! tracing::subscriber::set_global_default(
//!     tracing_subscriber::registry().with(telemetry.layer()),
//! )
//! .unwrap();
//! // ... at the end, what is still batched goes out:
//! telemetry.shutdown().unwrap();
//! ```

use std::fmt;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use troubadour::SystemHandle;

/// The exporters of one process. See the [module docs](self).
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: Option<SdkMeterProvider>,
}

/// Settings of a [`Telemetry`]: from [`Telemetry::otlp`].
pub struct TelemetryBuilder {
    service_name: String,
    endpoint: Option<String>,
    metrics: Option<(SystemHandle, Duration)>,
}

/// Why the exporters could not start or flush.
#[derive(Debug)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An exporter could not be built (a malformed endpoint, most often).
    Exporter(String),
    /// Spans or metrics could not be handed to the collector.
    Export(String),
}

impl fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TelemetryError::Exporter(e) => write!(
                f,
                "the OTLP exporter could not start: {e}; check the endpoint \
                 (a URL such as http://collector:4318)"
            ),
            TelemetryError::Export(e) => write!(
                f,
                "spans or metrics could not be exported: {e}; check that the \
                 collector listens at the endpoint and accepts OTLP over HTTP"
            ),
        }
    }
}

impl std::error::Error for TelemetryError {}

impl Telemetry {
    /// Exporters for the service `service_name` (OpenTelemetry's
    /// `service.name`), sending to `http://localhost:4318` unless told
    /// otherwise by [`TelemetryBuilder::endpoint`] or the standard
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` variables.
    pub fn otlp(service_name: impl Into<String>) -> TelemetryBuilder {
        TelemetryBuilder {
            service_name: service_name.into(),
            endpoint: None,
            metrics: None,
        }
    }

    /// A `tracing` layer that exports every span it sees through this
    /// telemetry's tracer (add it to the process's subscriber).
    pub fn layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer.tracer("troubadour"))
    }

    /// Sends what is batched now.
    pub fn flush(&self) -> Result<(), TelemetryError> {
        self.tracer
            .force_flush()
            .map_err(|e| TelemetryError::Export(e.to_string()))?;
        if let Some(meter) = &self.meter {
            meter
                .force_flush()
                .map_err(|e| TelemetryError::Export(e.to_string()))?;
        }
        Ok(())
    }

    /// Sends what is batched and stops the exporters.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        let traces = self.tracer.shutdown();
        let metrics = self.meter.map(|m| m.shutdown()).transpose();
        traces.map_err(|e| TelemetryError::Export(e.to_string()))?;
        metrics.map_err(|e| TelemetryError::Export(e.to_string()))?;
        Ok(())
    }
}

impl TelemetryBuilder {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans
    /// go to `/v1/traces` under it, metrics to `/v1/metrics`.
    pub fn endpoint(mut self, base: impl Into<String>) -> Self {
        self.endpoint = Some(base.into().trim_end_matches('/').to_string());
        self
    }

    /// Also exports `system`'s runtime metrics, every `every`.
    pub fn runtime_metrics(mut self, system: SystemHandle, every: Duration) -> Self {
        self.metrics = Some((system, every));
        self
    }

    /// Starts the exporters (their batches leave from threads of their own).
    pub fn build(self) -> Result<Telemetry, TelemetryError> {
        let resource = Resource::builder()
            .with_service_name(self.service_name)
            .build();
        let url = |path: &str| self.endpoint.as_ref().map(|base| format!("{base}{path}"));
        let mut spans = SpanExporter::builder().with_http();
        if let Some(url) = url("/v1/traces") {
            spans = spans.with_endpoint(url);
        }
        let spans = spans
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let tracer = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(spans)
            .build();
        let meter = match self.metrics {
            None => None,
            Some((system, every)) => {
                let mut metrics = MetricExporter::builder().with_http();
                if let Some(url) = url("/v1/metrics") {
                    metrics = metrics.with_endpoint(url);
                }
                let metrics = metrics
                    .build()
                    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
                let provider = SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_reader(
                        PeriodicReader::builder(metrics)
                            .with_interval(every)
                            .build(),
                    )
                    .build();
                register_runtime_metrics(&provider.meter("troubadour"), system);
                Some(provider)
            }
        };
        Ok(Telemetry { tracer, meter })
    }
}

/// One observable instrument per family of the Prometheus exposition,
/// each reading the system when the reader collects.
fn register_runtime_metrics(meter: &Meter, system: SystemHandle) {
    type Read = fn(&troubadour::KindMetrics) -> u64;
    let per_kind: [(&'static str, &'static str, bool, Read); 7] = [
        (
            "troubadour.actors.alive",
            "Actors alive, by kind.",
            false,
            |k| k.alive,
        ),
        (
            "troubadour.actors.spawned",
            "Actors spawned, by kind.",
            true,
            |k| k.spawned,
        ),
        (
            "troubadour.actors.stopped",
            "Actors stopped, by kind.",
            true,
            |k| k.stopped,
        ),
        (
            "troubadour.restarts",
            "Restarts by supervisors, by kind.",
            true,
            |k| k.restarts,
        ),
        (
            "troubadour.actor.failures",
            "Actors that failed, by kind.",
            true,
            |k| k.failures,
        ),
        (
            "troubadour.messages.handled",
            "Messages handled, by kind.",
            true,
            |k| k.messages_handled,
        ),
        (
            "troubadour.mailbox.depth",
            "Sampled mailbox depth, summed by kind.",
            false,
            |k| k.mailbox_depth,
        ),
    ];
    for (name, help, counter, read) in per_kind {
        let system = system.clone();
        let observe = move |o: &dyn opentelemetry::metrics::AsyncInstrument<u64>| {
            for k in system.metrics().kinds {
                o.observe(read(&k), &[KeyValue::new("kind", k.kind)]);
            }
        };
        if counter {
            meter
                .u64_observable_counter(name)
                .with_description(help)
                .with_callback(observe)
                .build();
        } else {
            meter
                .u64_observable_gauge(name)
                .with_description(help)
                .with_callback(observe)
                .build();
        }
    }
    let s = system.clone();
    meter
        .u64_observable_counter("troubadour.dead_letters")
        .with_description("Dead letters, by reason.")
        .with_callback(move |o| {
            for (reason, n) in s.metrics().dead_letters.by_reason() {
                o.observe(n, &[KeyValue::new("reason", reason.as_str())]);
            }
        })
        .build();
    let s = system.clone();
    meter
        .u64_observable_gauge("troubadour.scheduler.workers")
        .with_description("Scheduler workers, by state.")
        .with_callback(move |o| {
            let w = s.metrics().workers;
            for (state, n) in [
                ("busy", w.busy),
                ("searching", w.searching),
                ("parked", w.parked),
            ] {
                o.observe(n as u64, &[KeyValue::new("state", state)]);
            }
        })
        .build();
    let s = system;
    meter
        .u64_observable_gauge("troubadour.timers.armed")
        .with_description("Timers armed.")
        .with_callback(move |o| o.observe(s.metrics().timers_armed as u64, &[]))
        .build();
}
