//! The frame decoder on arbitrary input (proptest): it never panics, never allocates
//! more than the frame limit for a frame, whatever length a worker announces,
//! and decoding never reserves room for items a body does not hold.
//!
//! A counting global allocator records the largest single allocation the
//! test's own thread makes while a frame is read (tests run in parallel).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::task::{Context, Poll, Waker};

use super::framing::MessageCodec;
use super::{decode_message, next_message, MessageReader, ProtocolError};
use proptest::prelude::*;
use tokio_util::codec::FramedRead;

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    let _ = TRACKING.try_with(|tracking| {
        if tracking.get() {
            let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Room for allocations that do not depend on the announced length (error
/// values and their messages).
const SLACK: usize = 4096;

/// Room for one decoded item (a serde buffered key and value).
const ITEM_BYTES: usize = 128;

/// Runs `f` and returns its result with the largest allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|largest| largest.set(0));
    TRACKING.with(|tracking| tracking.set(true));
    let result = f();
    TRACKING.with(|tracking| tracking.set(false));
    (result, LARGEST.with(Cell::get))
}

/// Runs a future over in-memory input, which never waits, without a runtime
/// (a runtime would allocate too).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("reading from memory never waits"),
    }
}

/// A reader of `bytes` whose buffer starts empty, so that what it allocates
/// depends on what arrives and what the length prefix announces only.
fn reader(bytes: Vec<u8>, limit: usize) -> MessageReader<std::io::Cursor<Vec<u8>>> {
    FramedRead::with_capacity(std::io::Cursor::new(bytes), MessageCodec::new(limit), 0)
}

/// A frame: a length prefix (often a lie) and whatever bytes follow.
fn frames() -> impl Strategy<Value = Vec<u8>> {
    let announced = prop_oneof![
        any::<u32>(),
        0u32..64,
        Just(u32::MAX),
        (1u32 << 20)..(1u32 << 31),
    ];
    (announced, proptest::collection::vec(any::<u8>(), 0..512)).prop_map(|(len, body)| {
        let mut frame = len.to_be_bytes().to_vec();
        frame.extend(body);
        frame
    })
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..=max).prop_map(String::from_iter)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_nor_allocate_past_the_limit(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
        limit in 0usize..4096,
    ) {
        let mut input = reader(bytes, limit);
        let (_, largest) = largest_allocation(|| ready(next_message(&mut input)));
        prop_assert!(largest <= limit + SLACK, "allocated {largest} bytes with a {limit}-byte limit");
    }

    #[test]
    fn announced_lengths_over_the_limit_are_refused_before_allocating(
        frame in frames(),
        limit in 0usize..(1 << 16),
    ) {
        let announced = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let received = frame.len() - 4;
        let mut input = reader(frame, limit);
        let (result, largest) = largest_allocation(|| ready(next_message(&mut input)));
        // The frame buffer (at most the limit), plus what decoding the bytes
        // actually received takes: at most one item per byte.
        let bound = limit + ITEM_BYTES * received + SLACK;
        prop_assert!(largest <= bound, "allocated {largest} bytes with a {limit}-byte limit");
        if announced > limit {
            let refused = matches!(result, Err(ProtocolError::TooLarge { len, .. }) if len == announced);
            prop_assert!(refused, "{result:?}");
        }
    }

    #[test]
    fn arbitrary_bodies_decode_or_fail_without_panicking(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let _ = decode_message(&body);
    }

    #[test]
    fn message_shaped_maps_decode_or_fail_without_panicking(
        kind in prop_oneof![
            Just("hello".to_string()),
            Just("reply".to_string()),
            Just("call".to_string()),
            text(4),
        ],
        id in any::<i64>(),
        ok in any::<bool>(),
        extra in proptest::collection::vec((text(6), any::<i32>()), 0..4),
    ) {
        let mut map = serde_json::Map::new();
        map.insert("t".into(), kind.into());
        map.insert("id".into(), id.into());
        map.insert("ok".into(), ok.into());
        for (key, value) in extra {
            map.insert(key, value.into());
        }
        let body = rmp_serde::to_vec_named(&serde_json::Value::Object(map)).unwrap();
        let _ = decode_message(&body);
    }
}

proptest! {
    // Fewer cases: generating these bodies is the slow part.
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn container_headers_never_reserve_more_than_the_body_holds(
        pieces in proptest::collection::vec(
            prop_oneof![
                any::<u16>().prop_map(|n| { let mut v = vec![0xde]; v.extend(n.to_be_bytes()); v }),
                any::<u16>().prop_map(|n| { let mut v = vec![0xdc]; v.extend(n.to_be_bytes()); v }),
                any::<u32>().prop_map(|n| { let mut v = vec![0xdf]; v.extend(n.to_be_bytes()); v }),
                any::<u32>().prop_map(|n| { let mut v = vec![0xdd]; v.extend(n.to_be_bytes()); v }),
                (0u8..16).prop_map(|n| vec![0x80 | n]),
                Just(vec![0xa1, b't']),
                Just(vec![0xa5, b'r', b'e', b'p', b'l', b'y']),
                proptest::collection::vec(any::<u8>(), 0..8),
            ],
            0..120,
        ),
    ) {
        let body: Vec<u8> = pieces.concat();
        let (_, largest) = largest_allocation(|| decode_message(&body));
        let bound = ITEM_BYTES * body.len() + SLACK;
        prop_assert!(largest <= bound, "allocated {largest} bytes for a {}-byte body", body.len());
    }
}
