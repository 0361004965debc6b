//! An OpenTelemetry collector, as an operator runs one, receives over
//! OTLP/HTTP one request's spans from two nodes as one trace (the remote
//! layer carried its context), and the runtime's metrics. Spans are
//! filtered at `info`, as in production: the runtime's per-message spans
//! (`trace`) are not exported, and the trace still flows through an actor
//! on the way.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer as _;
use troubadour::prelude::*;
use troubadour_observe::otlp::Telemetry;
use troubadour_remote::{Remote, RemoteActor, RemoteMessage, Security};

#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(remote = "otlp_test.Cook")]
struct Cook(u32);

#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(reply = usize, remote = "otlp_test.Cooked")]
struct Cooked;

#[derive(Default, RemoteActor)]
#[remote(name = "otlp_test.Kitchen", handle(Cook), handle(Cooked))]
struct Kitchen(Vec<u32>);
impl Actor for Kitchen {}
impl Handler<Cook> for Kitchen {
    fn handle(&mut self, Cook(n): Cook, _: &mut Context<Self>) {
        self.0.push(n);
    }
}
impl Handler<Cooked> for Kitchen {
    fn handle(&mut self, _: Cooked, _: &mut Context<Self>) -> usize {
        self.0.len()
    }
}

/// Alpha's front desk: passes orders on to the kitchen on beta.
struct Waiter(ActorRef<Kitchen>);
impl Actor for Waiter {}
struct Order(u32);
impl Message for Order {
    type Reply = ();
}
impl Handler<Order> for Waiter {
    fn handle(&mut self, Order(n): Order, _: &mut Context<Self>) {
        self.0.tell(Cook(n)).unwrap();
    }
}

/// What the collector received, decoded.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

/// An OTLP/HTTP collector on loopback, on a runtime of its own.
fn collector() -> (String, Arc<Mutex<Received>>, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let received = Arc::new(Mutex::new(Received::default()));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let traces = received.clone();
    let metrics = received.clone();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP traces");
                let mut r = traces.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        r.spans.extend(scope.spans);
                    }
                }
            }),
        )
        .route(
            "/v1/metrics",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let request = ExportMetricsServiceRequest::decode(body).expect("OTLP metrics");
                metrics.lock().unwrap().metrics.push(request);
            }),
        );
    runtime.spawn(async move { axum::serve(listener, app).await });
    (url, received, runtime)
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    })
}

#[test]
fn a_collector_receives_one_trace_across_two_nodes_and_the_runtime_metrics() {
    let (url, received, _collector) = collector();
    let alpha = ActorSystem::builder()
        .name("alpha")
        .worker_threads(1)
        .build();
    let beta = ActorSystem::builder()
        .name("beta")
        .worker_threads(1)
        .observe()
        .build();
    let telemetry = Telemetry::otlp("otlp-test")
        .endpoint(url)
        .runtime_metrics(beta.handle(), Duration::from_secs(3600))
        .build()
        .unwrap();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(telemetry.layer().with_filter(LevelFilter::INFO)),
    )
    .unwrap();

    let start = |system: &ActorSystem| {
        system
            .block_on(
                Remote::builder("otlp", Security::PlaintextLoopbackOnly)
                    .register::<Cook>()
                    .register::<Cooked>()
                    .actor::<Kitchen>()
                    .listen("127.0.0.1:0".parse().unwrap())
                    .start(system),
            )
            .unwrap()
    };
    let (alpha_remote, beta_remote) = (start(&alpha), start(&beta));
    let kitchen = beta.spawn(Kitchen::default()).unwrap();
    beta_remote.expose("kitchen", &kitchen).unwrap();
    let remote_kitchen = alpha
        .block_on(alpha_remote.lookup::<Kitchen>(beta_remote.local_addr().unwrap(), "kitchen"))
        .unwrap();
    let waiter = alpha.spawn(Waiter(remote_kitchen.clone())).unwrap();
    tracing::info_span!("checkout").in_scope(|| waiter.tell(Order(1)).unwrap());
    waiter.ask(Order(2)).wait().unwrap();
    let cooked = remote_kitchen
        .ask(Cooked)
        .timeout(Duration::from_secs(30))
        .wait()
        .unwrap();
    assert_eq!(cooked, 2);
    telemetry.flush().unwrap();

    let r = received.lock().unwrap();
    let named = |name: &str| {
        r.spans
            .iter()
            .filter(|s| s.name == name)
            .collect::<Vec<_>>()
    };
    let checkout = named("checkout");
    assert_eq!(checkout.len(), 1, "{:#?}", r.spans);
    let trace = &checkout[0].trace_id;
    // Through the waiter, whose handling's span is filtered out, to beta:
    // the delivery there joins the checkout's trace. Order 2, sent outside
    // any span, carried no context.
    let received_on_beta = named("troubadour.remote.receive");
    assert_eq!(received_on_beta.len(), 1, "{:#?}", r.spans);
    assert_eq!(&received_on_beta[0].trace_id, trace);
    assert_eq!(received_on_beta[0].parent_span_id, checkout[0].span_id);
    assert_eq!(
        attribute(&received_on_beta[0].attributes, "from").as_deref(),
        Some("alpha")
    );
    assert!(named("handle").is_empty(), "trace-level spans filtered out");

    // Beta's runtime metrics: the kitchen's messages handled, by kind.
    let handled_by_kitchen = r
        .metrics
        .iter()
        .flat_map(|m| &m.resource_metrics)
        .flat_map(|m| &m.scope_metrics)
        .flat_map(|m| &m.metrics)
        .filter(|m| m.name == "troubadour.messages.handled")
        .flat_map(|m| match &m.data {
            Some(Data::Sum(sum)) => sum.data_points.clone(),
            other => panic!("a counter is a sum: {other:?}"),
        })
        .find(|p| attribute(&p.attributes, "kind").is_some_and(|k| k.ends_with("Kitchen")))
        .and_then(|p| p.value)
        .expect("troubadour.messages.handled{kind=…Kitchen}");
    // Cook was handled (and counted) before Cooked began, whose reply the
    // test waited for; Cooked itself may be counted just after its reply.
    assert!(
        matches!(handled_by_kitchen, number_data_point::Value::AsInt(n) if n >= 1),
        "{handled_by_kitchen:?}"
    );
    drop(r);
    alpha_remote.shutdown();
    beta_remote.shutdown();
    telemetry.shutdown().unwrap();
}
