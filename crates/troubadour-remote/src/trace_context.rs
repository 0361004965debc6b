//! A trace context carried with a message to another node, so that one
//! request's spans form one tree across the cluster (OpenTelemetry,
//! feature `opentelemetry`).
//!
//! The sender's context travels as a frame of its own, on the user lane
//! just before the message it belongs to (code [`SYSTEM_TRACE`]): the
//! message's frame is unchanged, and a connection's frames are decoded in
//! the order they were queued, so the receiver pairs the two without a
//! lookup. Its payload is the W3C `traceparent`'s binary form, 26 bytes:
//! version (0), trace id (16), parent span id (8), trace flags (1).
//!
//! Every node reads these frames (a node built without the feature drops
//! them), so nodes with and without the feature talk to each other. A node
//! with the feature sends one only when the span current at the send has a
//! valid OpenTelemetry context (a `tracing` span under a
//! `tracing_opentelemetry` layer, or else OpenTelemetry's own current
//! context): without an exporter set up it costs nothing.
//!
//! The receiving side opens an `info` span `troubadour.remote.receive`
//! (fields `message` and `from`) whose parent is the sender's context, and
//! delivers the message inside it; the core (feature `tracing`, turned on
//! by this one) makes the handling's span a child of it.

use crate::codec::type_id;

/// The code of a trace-context frame (a `Message` frame to receiver 0).
pub(crate) const SYSTEM_TRACE: u64 = type_id("troubadour.system.TraceContext");

/// Bytes of a trace-context payload.
pub(crate) const LEN: usize = 26;

/// A W3C trace context in its binary form (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceContext {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    pub(crate) flags: u8,
}

impl TraceContext {
    pub(crate) fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[1..17].copy_from_slice(&self.trace_id);
        b[17..25].copy_from_slice(&self.span_id);
        b[25] = self.flags;
        b
    }

    /// `None` for anything but a version-0 context of exactly [`LEN`]
    /// bytes with non-zero ids (what the W3C format calls invalid).
    pub(crate) fn from_bytes(b: &[u8]) -> Option<TraceContext> {
        if b.len() != LEN || b[0] != 0 {
            return None;
        }
        let trace_id: [u8; 16] = b[1..17].try_into().ok()?;
        let span_id: [u8; 8] = b[17..25].try_into().ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags: b[25],
        })
    }
}

/// The context of the span current on this thread, if it is valid.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<TraceContext> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let of_span = tracing::Span::current().context();
    let span = of_span.span();
    let mut context = span.span_context().clone();
    if !context.is_valid() {
        context = opentelemetry::Context::current()
            .span()
            .span_context()
            .clone();
    }
    context.is_valid().then(|| TraceContext {
        trace_id: context.trace_id().to_bytes(),
        span_id: context.span_id().to_bytes(),
        flags: context.trace_flags().to_u8(),
    })
}

#[cfg(not(feature = "opentelemetry"))]
#[inline(always)]
pub(crate) fn current() -> Option<TraceContext> {
    None
}

/// Runs `deliver` (the message's delivery to its actor) inside a span
/// joined to the sender's trace, when it sent one: the message's node
/// records that span as its sender's.
#[cfg(feature = "opentelemetry")]
pub(crate) fn delivered_in<R>(
    context: Option<TraceContext>,
    message: &'static str,
    from: &troubadour::NodeId,
    deliver: impl FnOnce() -> R,
) -> R {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(context) = context else {
        return deliver();
    };
    let remote = SpanContext::new(
        TraceId::from_bytes(context.trace_id),
        SpanId::from_bytes(context.span_id),
        TraceFlags::new(context.flags),
        true,
        TraceState::default(),
    );
    let span = tracing::info_span!(
        parent: None,
        "troubadour.remote.receive",
        message,
        from = %from.name()
    );
    // Fails only without an OpenTelemetry layer: the span then has no
    // trace to join, and nothing is exported anyway.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    span.in_scope(deliver)
}

/// Without the feature a received context is dropped.
#[cfg(not(feature = "opentelemetry"))]
#[inline(always)]
pub(crate) fn delivered_in<R>(
    _: Option<TraceContext>,
    _: &'static str,
    _: &troubadour::NodeId,
    deliver: impl FnOnce() -> R,
) -> R {
    deliver()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_survives_its_binary_form_and_invalid_ones_are_refused() {
        let c = TraceContext {
            trace_id: [7; 16],
            span_id: [9; 8],
            flags: 1,
        };
        assert_eq!(TraceContext::from_bytes(&c.to_bytes()), Some(c));
        let mut wrong_version = c.to_bytes();
        wrong_version[0] = 1;
        assert_eq!(TraceContext::from_bytes(&wrong_version), None);
        assert_eq!(TraceContext::from_bytes(&c.to_bytes()[..25]), None);
        let zero_trace = TraceContext {
            trace_id: [0; 16],
            ..c
        };
        assert_eq!(TraceContext::from_bytes(&zero_trace.to_bytes()), None);
    }
}
