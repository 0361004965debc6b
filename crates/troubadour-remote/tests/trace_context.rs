//! One request's spans form one tree across nodes: a message sent inside a
//! span carries its OpenTelemetry context to the other node, where the
//! message is delivered in a span joined to that trace and handled in a
//! child of it (feature `opentelemetry`).

mod common;

use common::Ca;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use troubadour::prelude::*;
use troubadour_remote::{Remote, RemoteActor, RemoteMessage, Security};

const GUARD: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(remote = "trace_test.Cook")]
struct Cook(u32);

#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(reply = Vec<u32>, remote = "trace_test.Cooked")]
struct Cooked;

#[derive(Default, RemoteActor)]
#[remote(name = "trace_test.Kitchen", handle(Cook), handle(Cooked))]
struct Kitchen(Vec<u32>);
impl Actor for Kitchen {}
impl Handler<Cook> for Kitchen {
    fn handle(&mut self, Cook(n): Cook, _: &mut Context<Self>) {
        self.0.push(n);
    }
}
impl Handler<Cooked> for Kitchen {
    fn handle(&mut self, _: Cooked, _: &mut Context<Self>) -> Vec<u32> {
        self.0.clone()
    }
}

fn node(name: &str, ca: &Ca) -> (ActorSystem, Remote) {
    let system = ActorSystem::builder().name(name).worker_threads(1).build();
    let remote = system
        .block_on(
            Remote::builder("traced", Security::Tls(ca.tls(name, ca)))
                .register::<Cook>()
                .register::<Cooked>()
                .actor::<Kitchen>()
                .listen("127.0.0.1:0".parse().unwrap())
                .start(&system),
        )
        .unwrap();
    (system, remote)
}

fn field(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

#[test]
fn a_message_sent_inside_a_span_is_handled_in_the_same_trace_on_the_other_node() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("trace_context test")));
    // Global: both nodes' threads report to it, as every thread of one
    // process would.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let ca = Ca::new("trace CA");
    let (alpha, alpha_remote) = node("alpha", &ca);
    let (beta, beta_remote) = node("beta", &ca);
    let kitchen = beta.spawn(Kitchen::default()).unwrap();
    beta_remote.expose("kitchen", &kitchen).unwrap();
    let remote_kitchen = alpha
        .block_on(alpha_remote.lookup::<Kitchen>(beta_remote.local_addr().unwrap(), "kitchen"))
        .unwrap();

    let request = tracing::info_span!("request");
    request.in_scope(|| remote_kitchen.tell(Cook(1)).unwrap());
    drop(request);
    // Outside any span: no context travels, its handling starts a trace
    // of its own.
    remote_kitchen.tell(Cook(2)).unwrap();
    let cooked = remote_kitchen.ask(Cooked).timeout(GUARD).wait().unwrap();
    assert_eq!(cooked, [1, 2]);
    drop(remote_kitchen);
    alpha_remote.shutdown();
    beta_remote.shutdown();
    drop((alpha, beta));
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let named =
        |name: &str| -> Vec<&SpanData> { spans.iter().filter(|s| s.name == name).collect() };
    let request = named("request");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    let trace = request.span_context.trace_id();
    // On beta: the delivery of Cook 1, a child of alpha's request span.
    let received = named("troubadour.remote.receive");
    assert_eq!(
        received.len(),
        1,
        "only Cook 1 carried a context: {spans:#?}"
    );
    let received = received[0];
    assert_eq!(received.span_context.trace_id(), trace);
    assert_eq!(received.parent_span_id, request.span_context.span_id());
    assert_eq!(field(received, "from").as_deref(), Some("alpha"));
    assert_eq!(
        field(received, "message").as_deref(),
        Some("trace_test.Cook")
    );
    // Its handling, on beta's worker: a child of the delivery.
    let handled: Vec<&SpanData> = named("handle")
        .into_iter()
        .filter(|s| field(s, "message").is_some_and(|m| m.ends_with("Cook")))
        .collect();
    assert_eq!(handled.len(), 2, "{spans:#?}");
    let in_trace: Vec<_> = handled
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    assert_eq!(in_trace.len(), 1, "Cook 1's handling only: {spans:#?}");
    assert_eq!(in_trace[0].parent_span_id, received.span_context.span_id());
}
