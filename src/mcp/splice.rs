//! A large text result, never encoded whole. rmcp serializes each message
//! whole (into its SSE event or JSON body over HTTP): a 10 MB text of
//! control characters would be a 60 MB string, and a typed result holds the
//! text twice (as text and as `structuredContent`). So a direct `tools/call`
//! answer whose text is at least [`LARGE`] bytes carries a stand-in instead
//! — `toolpool-splice:` and 32 random hex digits, in the text and in the
//! structured copy of a string result (made of the stand-in, so the text is
//! never copied) — and the text is kept here once. What sends the message
//! replaces each stand-in it knows with the text, escaped as JSON 16 KiB at
//! a time: over HTTP the response's body ([`Spliced`]), on stdio the writer
//! ([`SpliceWriter`]).
//!
//! Over HTTP a stand-in is known for [`KEPT`]: rmcp replays a request's
//! events to a client that reconnects (`Last-Event-ID`) for 60 s after the
//! request completed. On stdio nothing is sent again, so a text is
//! forgotten as soon as the message that carries it was written: a
//! server's memory does not grow with each large result it answered. A
//! tool cannot make a stand-in of another call's: it would have to guess
//! 128 random bits. A task's result (kept for `tasks/get`) is never stood
//! in for.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The least text stood in for: below it, encoding it whole costs little.
pub(in crate::mcp) const LARGE: usize = 64 * 1024;
/// How long a stand-in is known over HTTP (rmcp keeps a completed
/// request's events for replay 60 s), and at most on stdio.
const KEPT: Duration = Duration::from_secs(90);
/// How much of the text is escaped at a time: at most 96 KiB as JSON (a
/// control character is 6 bytes), pieces whose pages the allocator reuses
/// at once (pieces of 64 KiB cost a 5 MB text 3 to 6 MiB more over HTTP).
const CHUNK: usize = 16 * 1024;
const PREFIX: &[u8] = b"toolpool-splice:";
/// A stand-in's length: the prefix and 32 hex digits.
const STAND_IN: usize = PREFIX.len() + 32;

/// Each text stood in for, by its stand-in, with when it was.
type Texts = HashMap<String, (Arc<String>, Instant)>;

/// The texts stood in for, by stand-in, shared by the handlers (which put
/// them in) and what sends the messages (which splices them).
#[derive(Clone)]
pub(in crate::mcp) struct Splices {
    texts: Arc<Mutex<Texts>>,
    /// How many are known: what sends passes bytes on unread when 0.
    known: Arc<AtomicUsize>,
    /// A text is forgotten once the message that carries it was written
    /// ([`SpliceWriter::finish`]), rather than kept for [`KEPT`].
    once: bool,
}

impl Splices {
    /// Texts kept [`KEPT`], for a message sent again (HTTP's replay).
    pub(in crate::mcp) fn replayable() -> Splices {
        Splices::with_once(false)
    }

    /// Texts forgotten once written (stdio, where nothing is sent again).
    pub(in crate::mcp) fn once() -> Splices {
        Splices::with_once(true)
    }

    fn with_once(once: bool) -> Splices {
        Splices {
            texts: Arc::default(),
            known: Arc::default(),
            once,
        }
    }

    /// `text`, or if it is large, a stand-in for it (the text kept).
    pub(in crate::mcp) fn stand_in(&self, text: String) -> String {
        if text.len() < LARGE {
            return text;
        }
        let id: [u8; 16] = super::sealing::random();
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let stand_in = format!("{}{hex}", String::from_utf8_lossy(PREFIX));
        let mut texts = self.lock();
        let now = Instant::now();
        texts.retain(|_, (_, at)| now.duration_since(*at) < KEPT);
        texts.insert(stand_in.clone(), (Arc::new(text), now));
        self.known.store(texts.len(), Ordering::Release);
        stand_in
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Texts> {
        self.texts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn quiet(&self) -> bool {
        self.known.load(Ordering::Acquire) == 0
    }

    fn text_of(&self, stand_in: &[u8]) -> Option<Arc<String>> {
        let key = std::str::from_utf8(stand_in).ok()?;
        self.lock().get(key).map(|(text, _)| text.clone())
    }

    /// Forgets the texts of `written` (stand-ins of a message that was
    /// written whole), where texts are sent once.
    fn written(&self, written: &[Vec<u8>]) {
        if !self.once || written.is_empty() {
            return;
        }
        let mut texts = self.lock();
        for stand_in in written {
            if let Ok(key) = std::str::from_utf8(stand_in) {
                texts.remove(key);
            }
        }
        self.known.store(texts.len(), Ordering::Release);
    }

    /// Where `held` may be cut: before a known stand-in (with its text, the
    /// stand-in's end), or, without one, after all but what may be the
    /// start of one (everything, when nothing more will come).
    fn cut(&self, held: &[u8], ended: bool) -> Cut {
        let found = memchr::memmem::find_iter(held, PREFIX).find_map(|at| {
            let stand_in = held.get(at..at + STAND_IN)?;
            Some((at, self.text_of(stand_in)?))
        });
        match found {
            Some((at, text)) => Cut::StandIn(at, text),
            None if ended => Cut::Plain(held.len()),
            None => Cut::Plain(held.len() - (STAND_IN - 1).min(held.len())),
        }
    }
}

enum Cut {
    /// The bytes before it go as they are, then the text in its place.
    StandIn(usize, Arc<String>),
    /// So many bytes go as they are.
    Plain(usize),
}

/// The piece of `text` from `at` (at most [`CHUNK`] bytes, on a character's
/// boundary) escaped as inside a JSON string, and where the next begins.
fn escaped_piece(text: &str, at: usize) -> (Vec<u8>, usize) {
    let mut end = (at + CHUNK).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let quoted = serde_json::to_string(&text[at..end]).unwrap_or_default();
    let inner = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or("");
    (inner.as_bytes().to_vec(), end)
}

/// A writer of one message at a time (stdio's): the message's bytes go to
/// `inner` with each known stand-in replaced by its text. Call
/// [`finish`](Self::finish) at the message's end.
pub(in crate::mcp) struct SpliceWriter<'a, W: Write> {
    inner: &'a mut W,
    splices: &'a Splices,
    held: Vec<u8>,
    /// The stand-ins replaced in this message (a typed result's text and
    /// its structured copy share one).
    replaced: Vec<Vec<u8>>,
}

impl<'a, W: Write> SpliceWriter<'a, W> {
    pub(in crate::mcp) fn new(inner: &'a mut W, splices: &'a Splices) -> Self {
        SpliceWriter {
            inner,
            splices,
            held: Vec::new(),
            replaced: Vec::new(),
        }
    }

    /// Writes what is held: the message is whole.
    pub(in crate::mcp) fn finish(mut self) -> std::io::Result<()> {
        self.drain(true)?;
        self.splices.written(&self.replaced);
        Ok(())
    }

    fn drain(&mut self, ended: bool) -> std::io::Result<()> {
        loop {
            match self.splices.cut(&self.held, ended) {
                Cut::StandIn(at, text) => {
                    self.inner.write_all(&self.held[..at])?;
                    let mut from = 0;
                    while from < text.len() {
                        let (piece, next) = escaped_piece(&text, from);
                        self.inner.write_all(&piece)?;
                        from = next;
                    }
                    let stand_in = self.held.drain(..at + STAND_IN).skip(at).collect();
                    self.replaced.push(stand_in);
                }
                Cut::Plain(at) => {
                    self.inner.write_all(&self.held[..at])?;
                    self.held.drain(..at);
                    return Ok(());
                }
            }
        }
    }
}

impl<W: Write> Write for SpliceWriter<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.held.is_empty() && self.splices.quiet() {
            return self.inner.write(bytes);
        }
        self.held.extend_from_slice(bytes);
        self.drain(false)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(feature = "http")]
pub(in crate::mcp) use body::Spliced;

#[cfg(feature = "http")]
mod body {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use hyper::body::{Body as HttpBody, Bytes, Frame};

    use super::{escaped_piece, Cut, Splices, STAND_IN};

    /// A response's body with each known stand-in replaced by its text, a
    /// piece each time the client reads.
    pub(in crate::mcp) struct Spliced<B> {
        inner: B,
        splices: Splices,
        /// Read from `inner`, not yet passed on (a stand-in may begin at
        /// its end).
        held: Vec<u8>,
        /// The text being sent, and how much of it is.
        text: Option<(Arc<String>, usize)>,
        /// Frames ready to go.
        ready: VecDeque<Bytes>,
        ended: bool,
    }

    impl<B> Spliced<B> {
        pub(in crate::mcp) fn new(inner: B, splices: Splices) -> Spliced<B> {
            Spliced {
                inner,
                splices,
                held: Vec::new(),
                text: None,
                ready: VecDeque::new(),
                ended: false,
            }
        }

        /// Moves what can go of `held` to `ready`, up to a known stand-in
        /// (whose text then goes next).
        fn scan(&mut self) {
            let at = match self.splices.cut(&self.held, self.ended) {
                Cut::StandIn(at, text) => {
                    self.text = Some((text, 0));
                    at
                }
                Cut::Plain(at) => at,
            };
            let rest = self.held.split_off(at);
            self.ready
                .push_back(Bytes::from(std::mem::replace(&mut self.held, rest)));
            if self.text.is_some() {
                self.held.drain(..STAND_IN);
            }
        }

        fn next_piece(&mut self) -> Option<Bytes> {
            let (text, at) = self.text.as_mut()?;
            if *at >= text.len() {
                self.text = None;
                return None;
            }
            let (piece, next) = escaped_piece(text, *at);
            *at = next;
            Some(Bytes::from(piece))
        }
    }

    impl<B> HttpBody for Spliced<B>
    where
        B: HttpBody<Data = Bytes> + Unpin,
    {
        type Data = Bytes;
        type Error = B::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
            let this = &mut *self;
            loop {
                if let Some(frame) = this.ready.pop_front() {
                    if !frame.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(frame))));
                    }
                    continue;
                }
                if this.text.is_some() {
                    if let Some(piece) = this.next_piece() {
                        return Poll::Ready(Some(Ok(Frame::data(piece))));
                    }
                    this.scan();
                    continue;
                }
                if this.ended {
                    return Poll::Ready(None);
                }
                match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        this.ended = true;
                        this.scan();
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) if this.held.is_empty() && this.splices.quiet() => {
                            // Nothing to splice: passed on as it is.
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        Ok(data) => {
                            this.held.extend_from_slice(&data);
                            this.scan();
                        }
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    },
                }
            }
        }

        fn is_end_stream(&self) -> bool {
            self.ended && self.ready.is_empty() && self.text.is_none() && self.held.is_empty()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What goes out for `frames` (each written, or sent as a body frame,
    /// apart), by the stdio writer and (with `http`) by the body.
    fn sent(splices: &Splices, frames: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut writer = SpliceWriter::new(&mut out, splices);
        for frame in frames {
            writer.write_all(frame).unwrap();
        }
        writer.finish().unwrap();
        let mut all = vec![String::from_utf8(out).unwrap()];
        #[cfg(feature = "http")]
        {
            use http_body_util::{BodyExt, StreamBody};
            use hyper::body::{Bytes, Frame};
            let stream = futures_util::stream::iter(
                frames
                    .iter()
                    .map(|f| {
                        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::copy_from_slice(f)))
                    })
                    .collect::<Vec<_>>(),
            );
            let body = Spliced::new(StreamBody::new(stream), splices.clone());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let bytes = runtime.block_on(body.collect()).unwrap().to_bytes();
            all.push(String::from_utf8(bytes.to_vec()).unwrap());
        }
        all
    }

    #[test]
    fn a_large_text_goes_out_escaped_in_place_of_its_stand_in_wherever_writes_break() {
        let splices = Splices::replayable();
        let text: String = "\u{1}é\"\n😀".repeat(LARGE / 5);
        let message = |text: &str| {
            serde_json::json!({"content": [{"type": "text", "text": text}],
                               "structuredContent": {"result": text}})
            .to_string()
        };
        let expected = format!("data: {}\n\n", message(&text));
        let event = format!("data: {}\n\n", message(&splices.stand_in(text)));
        assert!(event.len() < 500, "{event}");
        let bytes = event.as_bytes();
        let whole = |out: Vec<String>| out.iter().all(|o| *o == expected);
        assert!(whole(sent(&splices, &[bytes])));
        // Cut at every place within the first stand-in.
        let first = memchr::memmem::find(bytes, PREFIX).unwrap();
        for cut in first..first + STAND_IN + 1 {
            let (a, b) = bytes.split_at(cut);
            assert!(whole(sent(&splices, &[a, b])), "cut at {cut}");
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert!(whole(sent(&splices, &singles)));
    }

    #[test]
    fn small_texts_and_unknown_stand_ins_pass_unchanged() {
        let splices = Splices::replayable();
        assert_eq!(splices.stand_in("hi".into()), "hi");
        assert!(splices.quiet());
        assert!(splices
            .stand_in("x".repeat(LARGE))
            .starts_with("toolpool-splice:"));
        // A tool's own text that looks like a stand-in is not one.
        let made_up = "{\"text\":\"toolpool-splice:00000000000000000000000000000000\"}";
        for out in sent(&splices, &[made_up.as_bytes()]) {
            assert_eq!(out, made_up);
        }
    }

    #[test]
    fn on_stdio_a_text_is_forgotten_once_its_message_is_written() {
        let splices = Splices::once();
        let text = "\u{1}".repeat(LARGE);
        let stand_in = splices.stand_in(text.clone());
        let message = |text: &str| {
            serde_json::json!({"content": [{"type": "text", "text": text}],
                               "structuredContent": {"result": text}})
            .to_string()
        };
        let write = |message: &str| {
            let mut out = Vec::new();
            let mut writer = SpliceWriter::new(&mut out, &splices);
            writer.write_all(message.as_bytes()).unwrap();
            writer.finish().unwrap();
            String::from_utf8(out).unwrap()
        };
        // Both places that share the stand-in get the text.
        assert_eq!(write(&message(&stand_in)), message(&text));
        assert!(splices.quiet());
        assert!(splices.lock().is_empty());
        // Sent again, the stand-in is no longer known.
        assert_eq!(write(&message(&stand_in)), message(&stand_in));
    }
}
