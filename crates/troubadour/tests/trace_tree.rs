//! With the `tracing` feature, the span of a message's handling is a child
//! of the span that was current where it was sent: one request's spans form
//! one tree across the actors it goes through, whichever threads run them.
#![cfg(feature = "tracing")]

use std::sync::{Arc, Mutex};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;
use troubadour::prelude::*;

/// Every span opened: its name, its `message` field and its parent's name.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Opened>>>);

#[derive(Clone, Debug)]
struct Opened {
    id: u64,
    name: &'static str,
    message: String,
    parent: Option<u64>,
}

struct MessageField(String);
impl tracing::field::Visit for MessageField {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut message = MessageField(String::new());
        attrs.record(&mut message);
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        self.0.lock().unwrap().push(Opened {
            id: id.into_u64(),
            name: attrs.metadata().name(),
            message: message.0,
            parent,
        });
    }
}

struct Front {
    back: ActorRef<Back>,
}
impl Actor for Front {}

struct Order(u32);
impl Message for Order {
    type Reply = ();
}
impl Handler<Order> for Front {
    fn handle(&mut self, Order(n): Order, _: &mut Context<Self>) {
        self.back.tell(Cook(n)).unwrap();
    }
}

#[derive(Default)]
struct Back {
    cooked: Vec<u32>,
}
impl Actor for Back {}

struct Cook(u32);
impl Message for Cook {
    type Reply = ();
}
impl Handler<Cook> for Back {
    fn handle(&mut self, Cook(n): Cook, _: &mut Context<Self>) {
        self.cooked.push(n);
    }
}

struct Cooked;
impl Message for Cooked {
    type Reply = Vec<u32>;
}
impl Handler<Cooked> for Back {
    fn handle(&mut self, _: Cooked, _: &mut Context<Self>) -> Vec<u32> {
        self.cooked.clone()
    }
}

#[test]
fn a_handled_message_s_span_is_a_child_of_the_span_it_was_sent_in() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    // Global: the actors run on the system's worker threads.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let system = ActorSystem::builder().worker_threads(2).build();
    let back = system.spawn(Back::default()).unwrap();
    let front = system.spawn(Front { back: back.clone() }).unwrap();
    let request = tracing::info_span!("request", message = "order 7");
    let request_id = request.id().unwrap().into_u64();
    request.in_scope(|| front.tell(Order(7)).unwrap());
    // Sent from no span: its handling's span has no parent from the test.
    front.tell(Order(8)).unwrap();
    let mut cooked = Vec::new();
    while cooked.len() < 2 {
        cooked = back.ask(Cooked).wait().unwrap();
    }
    drop(system);

    let all = spans.0.lock().unwrap().clone();
    let handling = |message_type: &str| -> Vec<Opened> {
        all.iter()
            .filter(|s| s.name == "handle" && s.message.ends_with(message_type))
            .cloned()
            .collect()
    };
    let orders = handling("Order");
    let cooks = handling("Cook");
    assert_eq!((orders.len(), cooks.len()), (2, 2), "{all:#?}");
    // Order 7 was sent inside `request`; its Cook inside Order 7's handling.
    let order_7 = orders
        .iter()
        .find(|o| o.parent == Some(request_id))
        .unwrap_or_else(|| panic!("no Order handled under the request: {all:#?}"));
    assert!(
        cooks.iter().any(|c| c.parent == Some(order_7.id)),
        "Cook 7 is not a child of Order 7's handling: {all:#?}"
    );
    // Order 8, sent outside any span, starts a tree of its own: a root
    // whose Cook is its child, nothing under `request`.
    let order_8 = orders.iter().find(|o| o.id != order_7.id).unwrap();
    assert_eq!(order_8.parent, None, "{all:#?}");
    assert!(
        cooks.iter().any(|c| c.parent == Some(order_8.id)),
        "{all:#?}"
    );
}
