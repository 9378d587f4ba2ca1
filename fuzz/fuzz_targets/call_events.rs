//! Fuzz target: the caller's call table fed an arbitrary interleaving of sends, accepts,
//! replies, items, connection losses, cancellations, timeouts and a shutdown never panics and
//! completes every call exactly once.
#![no_main]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zmesh::proto::calls::{CallId, CallTable};
use zmesh::proto::wire::ReplyCode;

#[derive(Debug, Arbitrary)]
enum Event {
    Start { conn: u8, ttl_ms: u16 },
    Sent(u8),
    SendFailed(u8),
    Accept { call: u8, conn: u8 },
    Item { call: u8, conn: u8, seq: u8 },
    Reply { call: u8, conn: u8, code: u8 },
    Lost(u8),
    Cancel(u8),
    Wait(u16),
    Shutdown,
}

fuzz_target!(|events: Vec<Event>| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut table: CallTable<u8> = CallTable::new();
    let mut started: Vec<CallId> = Vec::new();
    let mut done: HashSet<CallId> = HashSet::new();
    let pick =
        |started: &Vec<CallId>, i: u8| started.get(i as usize % started.len().max(1)).copied();
    for ev in events {
        match ev {
            Event::Start { conn, ttl_ms } => {
                let ttl = (ttl_ms > 0).then(|| Duration::from_millis(u64::from(ttl_ms)));
                started.push(table.start(conn % 4, ttl, now));
            }
            Event::Sent(i) => {
                if let Some(id) = pick(&started, i) {
                    let _ = table.handle_sent(id, now);
                }
            }
            Event::SendFailed(i) => {
                if let Some(id) = pick(&started, i) {
                    let _ = table.handle_send_failed(id, now);
                }
            }
            Event::Accept { call, conn } => {
                if let Some(id) = pick(&started, call) {
                    let _ = table.handle_accept(id, conn % 4, now);
                }
            }
            Event::Item { call, conn, seq } => {
                if let Some(id) = pick(&started, call) {
                    let _ = table.handle_item(id, conn % 4, u64::from(seq % 4), Bytes::new(), now);
                }
            }
            Event::Reply { call, conn, code } => {
                if let (Some(id), Ok(code)) = (pick(&started, call), ReplyCode::try_from(code % 16))
                {
                    let _ = table.handle_reply(id, conn % 4, code, Bytes::new(), now);
                }
            }
            Event::Lost(conn) => {
                let _ = table.handle_connection_lost(conn % 4, now);
            }
            Event::Cancel(i) => {
                if let Some(id) = pick(&started, i) {
                    let _ = table.handle_cancel(id, now);
                }
            }
            Event::Wait(ms) => {
                now += Duration::from_millis(u64::from(ms));
                table.handle_timeout(now);
            }
            Event::Shutdown => table.handle_shutdown(now),
        }
        while let Some((id, _result)) = table.poll_completion() {
            assert!(done.insert(id), "call {id:?} completed twice");
        }
        while table.poll_item().is_some() {}
    }
    table.handle_shutdown(now);
    while let Some((id, _)) = table.poll_completion() {
        assert!(done.insert(id), "call {id:?} completed twice");
    }
    assert_eq!(
        done.len(),
        started.len(),
        "every call completes exactly once"
    );
});
