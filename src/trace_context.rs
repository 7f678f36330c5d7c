//! W3C trace context (`traceparent`, `tracestate`) as a call carries it to
//! its tool: from an MCP request's `_meta` (reserved there by protocol
//! 2026-07-28, honoured on every version), or from a library caller
//! ([`crate::InvokeOptions::with_trace`]). The tool sees it as
//! `_context["traceparent"]` and `TRACEPARENT` in its environment.
//!
//! Checked here, without the OpenTelemetry crates, so that a build without
//! the `otel` feature still passes a client's trace on: the two headers'
//! syntax is a few fixed-width hex fields (what the `opentelemetry` SDK's own
//! propagator checks, which needs the SDK). Depends on nothing else in the
//! crate.

use std::fmt;

/// The longest `tracestate` kept (W3C: 32 members of at most 256 bytes; a
/// platform "SHOULD" propagate at least 512 characters). A longer one is
/// dropped; the `traceparent` stays.
const MAX_TRACESTATE: usize = 8192;

/// A valid `traceparent`, and the `tracestate` that came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// The fields of a valid `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent<'a> {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: &'a str,
    /// 16 lowercase hex digits (the caller's span), not all zero.
    pub parent_id: &'a str,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// The context of `traceparent` (and `tracestate`), or `None` when
    /// `traceparent` is not a valid W3C `traceparent`: wrong length or
    /// version, uppercase or non-hex digits, an all-zero trace or span id.
    /// A `tracestate` that is empty, too long or not printable ASCII is
    /// dropped (the `traceparent` is kept), as W3C says a receiver may.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let fields = parse_traceparent(traceparent)?;
        let tracestate = tracestate
            .map(str::trim)
            .filter(|state| is_tracestate(state))
            .map(str::to_string);
        Some(TraceContext {
            // Version 00 as sent; a later version's extra fields are dropped,
            // as a 00 receiver must do when it passes the trace on.
            traceparent: format_traceparent(fields.trace_id, fields.parent_id, fields.flags),
            tracestate,
        })
    }

    /// A context naming the span `span_id` of `trace_id` (each lowercase
    /// hex, of the W3C widths and not all zero), with `flags` and the
    /// `tracestate` kept from where it came; `None` when an id is invalid.
    pub fn from_ids(
        trace_id: &str,
        span_id: &str,
        flags: u8,
        tracestate: Option<&str>,
    ) -> Option<TraceContext> {
        TraceContext::parse(&format_traceparent(trace_id, span_id, flags), tracestate)
    }

    /// The `traceparent` header's value (version 00).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header's value, when one came and is kept.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The `traceparent`'s fields.
    pub fn fields(&self) -> TraceParent<'_> {
        // Checked when made: the text is a valid version-00 traceparent.
        TraceParent {
            trace_id: &self.traceparent[3..35],
            parent_id: &self.traceparent[36..52],
            flags: u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0),
        }
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

fn format_traceparent(trace_id: &str, span_id: &str, flags: u8) -> String {
    format!("00-{trace_id}-{span_id}-{flags:02x}")
}

/// W3C Trace Context, level 1, "traceparent Header Field Values": version
/// `00` is exactly 55 characters; a later version (not `ff`) may append
/// `-`-separated fields, which are ignored.
fn parse_traceparent(text: &str) -> Option<TraceParent<'_>> {
    let text = text.trim_matches([' ', '\t']);
    if text.len() < 55 || !text.is_ascii() {
        return None;
    }
    let version = &text[0..2];
    if !is_hex(version) || version == "ff" {
        return None;
    }
    if version == "00" && text.len() != 55 {
        return None;
    }
    if text.len() > 55 && text.as_bytes()[55] != b'-' {
        return None;
    }
    let bytes = text.as_bytes();
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let (trace_id, parent_id, flags) = (&text[3..35], &text[36..52], &text[53..55]);
    if !is_hex(trace_id) || !is_hex(parent_id) || !is_hex(flags) {
        return None;
    }
    if all_zero(trace_id) || all_zero(parent_id) {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        flags: u8::from_str_radix(flags, 16).ok()?,
    })
}

/// Lowercase hex digits only (W3C: uppercase is invalid).
fn is_hex(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn all_zero(text: &str) -> bool {
    text.bytes().all(|b| b == b'0')
}

/// Not empty, not too long, printable ASCII (what a header value and an
/// environment variable can carry). Its members' syntax is the tracing
/// system's business: it is passed on as it came.
fn is_tracestate(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_TRACESTATE
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::TraceContext;

    const VALID: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_valid_traceparent_is_kept_with_its_fields_and_tracestate() {
        let trace = TraceContext::parse(VALID, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(trace.traceparent(), VALID);
        assert_eq!(trace.tracestate(), Some("rojo=00f067aa0ba902b7"));
        let fields = trace.fields();
        assert_eq!(fields.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(fields.parent_id, "b7ad6b7169203331");
        assert_eq!(fields.flags, 1);
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
            "0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033é1-01",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_00_and_its_extra_fields_dropped() {
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes";
        let trace = TraceContext::parse(later, None).unwrap();
        assert_eq!(trace.traceparent(), VALID);
        let glued = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x";
        assert_eq!(TraceContext::parse(glued, None), None);
    }

    #[test]
    fn a_bad_tracestate_is_dropped_and_the_traceparent_kept() {
        for bad in ["", "  ", "a=\n1", "ключ=1"] {
            let trace = TraceContext::parse(VALID, Some(bad)).unwrap();
            assert_eq!(trace.tracestate(), None, "{bad:?}");
        }
        let long = "a=".to_string() + &"x".repeat(9000);
        assert_eq!(
            TraceContext::parse(VALID, Some(&long))
                .unwrap()
                .tracestate(),
            None
        );
    }

    #[test]
    fn from_ids_names_another_span_of_the_trace() {
        let trace = TraceContext::from_ids(
            "0af7651916cd43dd8448eb211c80319c",
            "00f067aa0ba902b7",
            0,
            Some("k=v"),
        )
        .unwrap();
        assert_eq!(
            trace.traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"
        );
        assert_eq!(trace.tracestate(), Some("k=v"));
        assert_eq!(
            TraceContext::from_ids("0af7651916cd43dd8448eb211c80319c", "0", 1, None),
            None
        );
    }
}
