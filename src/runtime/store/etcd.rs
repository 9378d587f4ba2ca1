//! The etcd v3 descriptor store, for many hosts (MISSION D2).
//!
//! It speaks etcd's own JSON API (the gRPC gateway every etcd 3.4+ serves on its client port,
//! `POST /v3/kv/range`, `/v3/lease/grant`, `/v3/watch`, …) over plain HTTP/1.1, so it needs no
//! protobuf compiler, no gRPC stack and no extra crate: a fresh machine builds it as it is.
//! TLS and authentication are not supported (a plain `etcd://host:port` only).
//!
//! # Keys and leases
//!
//! A node's descriptor is the value of `{prefix}nodes/{rid}` (prefix default `/zmesh/`),
//! attached to one etcd lease of the node's own, granted with the lease TTL and kept alive on
//! the renewal interval. A put grants a new lease and overwrites the key (a new process run
//! takes over from the old one's leftover). A renewal keeps the lease alive and then reads
//! the key: gone means [`RenewOutcome::Lost`], another generation means
//! [`RenewOutcome::Superseded`]. A removal revokes the lease, which deletes the key if it is
//! still this lease's and never another run's.
//!
//! etcd may keep a lease longer than its TTL (it extends every lease on a leader change), so
//! expiry is "not before", never a precise clock.
//!
//! # Watch
//!
//! The watch reads the whole prefix (a [`WatchEvent::Reload`] at revision R), then watches
//! from R + 1: every later change arrives once, in order. When the stream breaks it says so
//! ([`WatchEvent::Unreachable`]) and resumes from the last revision it delivered
//! ([`WatchEvent::Resumed`] once it is back: nothing missed, nothing repeated). When etcd has
//! compacted its history past that revision (etcd#8668) it reads everything again
//! ([`WatchEvent::Reload`] with [`ReloadReason::Compacted`]) and watches from there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{
    Change, Descriptor, Entry, Lease, ReloadReason, RenewOutcome, Store, StoreError, StoreFuture,
    Watch, WatchEvent,
};
use crate::proto::discovery::STORE_RETRY;

/// Longest wait for one request (connect, send, whole answer) to one etcd member.
pub const ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest answer read from etcd (a range of every descriptor of a large mesh fits).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// The etcd v3 descriptor store (see the module doc). Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `host:port` of each member.
    endpoints: Vec<String>,
    /// Key prefix, ending in `/`.
    prefix: String,
    /// The member that answered last (tried first).
    current: AtomicUsize,
}

impl EtcdStore {
    /// A store on the etcd members `endpoints` (`host:port`) under key `prefix`. Nothing is
    /// contacted yet.
    pub fn new(endpoints: Vec<String>, prefix: String) -> EtcdStore {
        let mut prefix = prefix;
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        EtcdStore {
            inner: Arc::new(Inner {
                endpoints,
                prefix,
                current: AtomicUsize::new(0),
            }),
        }
    }

    fn key(&self, rid: &str) -> String {
        format!("{}nodes/{rid}", self.inner.prefix)
    }

    fn nodes_prefix(&self) -> String {
        format!("{}nodes/", self.inner.prefix)
    }

    /// One unary request, to the member that answered last, then to the others in turn.
    async fn call(&self, path: &str, body: Value) -> Result<Value, StoreError> {
        let n = self.inner.endpoints.len().max(1);
        let start = self.inner.current.load(Ordering::Relaxed);
        let body = body.to_string();
        let mut last = StoreError::Unavailable("no etcd endpoint".into());
        for i in 0..n {
            let idx = (start + i) % n;
            let Some(host) = self.inner.endpoints.get(idx) else {
                break;
            };
            let attempt = tokio::time::timeout(ETCD_REQUEST_TIMEOUT, async {
                let mut stream = HttpStream::post(host, path, &body).await?;
                let bytes = stream.read_all().await?;
                stream.check_status(&bytes)?;
                serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| StoreError::Corrupt(format!("etcd answer is not JSON: {e}")))
            })
            .await;
            match attempt {
                Ok(Ok(v)) => {
                    self.inner.current.store(idx, Ordering::Relaxed);
                    return Ok(v);
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = StoreError::Unavailable(format!(
                        "etcd {host}: no answer within {ETCD_REQUEST_TIMEOUT:?}"
                    ))
                }
            }
        }
        Err(last)
    }

    /// Every descriptor under the prefix, with its lease id, and the revision read at.
    async fn range_all(&self) -> Result<(Vec<(Descriptor, i64)>, i64), StoreError> {
        let prefix = self.nodes_prefix();
        let v = self
            .call(
                "/v3/kv/range",
                json!({ "key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix.as_bytes())) }),
            )
            .await?;
        let revision = num(&v["header"]["revision"]).unwrap_or(0);
        let mut out = Vec::new();
        for kv in v["kvs"].as_array().into_iter().flatten() {
            if let Some(d) = kv_descriptor(kv) {
                out.push((d, num(&kv["lease"]).unwrap_or(0)));
            }
        }
        Ok((out, revision))
    }
}

impl Store for EtcdStore {
    fn put(&self, descriptor: &Descriptor, ttl: Duration) -> StoreFuture<'_, Lease> {
        let d = descriptor.clone();
        Box::pin(async move {
            let secs = ttl.as_secs().max(1);
            let grant = self
                .call("/v3/lease/grant", json!({ "TTL": secs.to_string() }))
                .await?;
            let id = num(&grant["ID"]).ok_or_else(|| {
                StoreError::Unavailable(format!("etcd granted no lease: {grant}"))
            })?;
            self.call(
                "/v3/kv/put",
                json!({
                    "key": b64(self.key(&d.rid).as_bytes()),
                    "value": b64(d.to_json().as_bytes()),
                    "lease": id.to_string(),
                }),
            )
            .await?;
            Ok(Lease {
                rid: d.rid,
                generation: d.generation,
                ttl,
                id,
            })
        })
    }

    fn renew(&self, lease: &Lease) -> StoreFuture<'_, RenewOutcome> {
        let lease = lease.clone();
        Box::pin(async move {
            let kept = self
                .call("/v3/lease/keepalive", json!({ "ID": lease.id.to_string() }))
                .await?;
            // An expired or unknown lease is answered without a TTL (or with 0).
            if num(&kept["result"]["TTL"]).unwrap_or(0) <= 0 {
                return Ok(RenewOutcome::Lost);
            }
            let v = self
                .call(
                    "/v3/kv/range",
                    json!({ "key": b64(self.key(&lease.rid).as_bytes()) }),
                )
                .await?;
            let Some(kv) = v["kvs"].as_array().and_then(|a| a.first()) else {
                return Ok(RenewOutcome::Lost);
            };
            match kv_descriptor(kv) {
                Some(d) if d.generation != lease.generation => Ok(RenewOutcome::Superseded {
                    generation: d.generation,
                }),
                Some(_) if num(&kv["lease"]) == Some(lease.id) => Ok(RenewOutcome::Renewed),
                // Our generation under another lease (this run put it again): not this lease.
                _ => Ok(RenewOutcome::Lost),
            }
        })
    }

    fn remove(&self, lease: &Lease) -> StoreFuture<'_, ()> {
        let id = lease.id;
        Box::pin(async move {
            // Revoking deletes the keys attached to this lease only; an unknown lease (already
            // expired) is not an error.
            match self
                .call("/v3/lease/revoke", json!({ "ID": id.to_string() }))
                .await
            {
                Ok(_) => Ok(()),
                Err(StoreError::Corrupt(m)) if m.contains("lease not found") => Ok(()),
                Err(e) => Err(e),
            }
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<Entry>> {
        Box::pin(async move {
            let (descriptors, _) = self.range_all().await?;
            let mut out = Vec::new();
            for (descriptor, lease) in descriptors {
                let ttl = self
                    .call("/v3/lease/timetolive", json!({ "ID": lease.to_string() }))
                    .await
                    .ok();
                let left = ttl
                    .as_ref()
                    .and_then(|v| num(&v["TTL"]))
                    .filter(|t| *t >= 0);
                let granted = ttl
                    .as_ref()
                    .and_then(|v| num(&v["grantedTTL"]).or_else(|| num(&v["granted_ttl"])));
                // etcd counts in whole seconds.
                let secs = |s: i64| u64::try_from(s).unwrap_or(0) * 1000;
                out.push(Entry {
                    descriptor,
                    lease_age_ms: match (granted, left) {
                        (Some(g), Some(l)) => Some(secs(g.saturating_sub(l))),
                        _ => None,
                    },
                    expires_in_ms: left.map(secs),
                });
            }
            out.sort_by(|a, b| a.descriptor.rid.cmp(&b.descriptor.rid));
            Ok(out)
        })
    }

    fn watch(&self) -> Result<Watch, StoreError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
        let (tx, rx) = mpsc::channel(16);
        let store = self.clone();
        let task = handle.spawn(async move { watch_loop(store, tx).await });
        Ok(Watch::new(rx, task))
    }

    fn url(&self) -> String {
        format!(
            "etcd://{}{}",
            self.inner.endpoints.join(","),
            self.inner.prefix
        )
    }
}

/// Why a watch stream ended.
enum StreamEnd {
    /// etcd compacted its history past the revision asked for.
    Compacted,
    /// The stream broke (connection lost, etcd down, an error answer).
    Broken(StoreError),
    /// The receiver of the watch is gone.
    Closed,
}

async fn watch_loop(store: EtcdStore, tx: mpsc::Sender<WatchEvent>) {
    // The revision of the last change delivered; None: read everything first.
    let mut revision: Option<i64> = None;
    let mut reason = ReloadReason::Initial;
    let mut reachable = true;
    loop {
        let from = match revision {
            Some(r) => r,
            None => match store.range_all().await {
                Ok((descriptors, r)) => {
                    reachable = true;
                    let descriptors = descriptors.into_iter().map(|(d, _)| d).collect();
                    if tx
                        .send(WatchEvent::Reload {
                            descriptors,
                            reason,
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                    revision = Some(r);
                    r
                }
                Err(e) => {
                    if std::mem::replace(&mut reachable, false)
                        && tx.send(WatchEvent::Unreachable(e)).await.is_err()
                    {
                        return;
                    }
                    reason = ReloadReason::Resumed;
                    if wait_retry(&tx).await {
                        return;
                    }
                    continue;
                }
            },
        };
        match stream_changes(&store, from, &tx, &mut revision, &mut reachable).await {
            StreamEnd::Closed => return,
            StreamEnd::Compacted => {
                revision = None;
                reason = ReloadReason::Compacted;
            }
            StreamEnd::Broken(e) => {
                if std::mem::replace(&mut reachable, false)
                    && tx.send(WatchEvent::Unreachable(e)).await.is_err()
                {
                    return;
                }
                if wait_retry(&tx).await {
                    return;
                }
            }
        }
    }
}

/// Waits [`STORE_RETRY`]; true if the watch's receiver went away meanwhile.
async fn wait_retry(tx: &mpsc::Sender<WatchEvent>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(STORE_RETRY) => false,
        _ = tx.closed() => true,
    }
}

/// Watches the prefix from `from + 1` and hands every change on, advancing `revision`.
async fn stream_changes(
    store: &EtcdStore,
    from: i64,
    tx: &mpsc::Sender<WatchEvent>,
    revision: &mut Option<i64>,
    reachable: &mut bool,
) -> StreamEnd {
    let prefix = store.nodes_prefix();
    let body = json!({
        "create_request": {
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix.as_bytes())),
            "start_revision": (from + 1).to_string(),
        }
    })
    .to_string();
    let n = store.inner.endpoints.len().max(1);
    let idx = store.inner.current.load(Ordering::Relaxed) % n;
    let Some(host) = store.inner.endpoints.get(idx).cloned() else {
        return StreamEnd::Broken(StoreError::Unavailable("no etcd endpoint".into()));
    };
    let opened = tokio::time::timeout(
        ETCD_REQUEST_TIMEOUT,
        HttpStream::post(&host, "/v3/watch", &body),
    )
    .await;
    let mut stream = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            store.inner.current.store((idx + 1) % n, Ordering::Relaxed);
            return StreamEnd::Broken(e);
        }
        Err(_) => {
            store.inner.current.store((idx + 1) % n, Ordering::Relaxed);
            return StreamEnd::Broken(StoreError::Unavailable(format!(
                "etcd {host}: watch not opened within {ETCD_REQUEST_TIMEOUT:?}"
            )));
        }
    };
    if stream.status != 200 {
        let bytes = stream.read_all().await.unwrap_or_default();
        return StreamEnd::Broken(stream.check_status(&bytes).err().unwrap_or_else(|| {
            StoreError::Unavailable(format!("etcd watch answered {}", stream.status))
        }));
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            c = stream.next_bytes() => c,
            _ = tx.closed() => return StreamEnd::Closed,
        };
        let chunk = match chunk {
            Ok(Some(c)) => c,
            Ok(None) => {
                return StreamEnd::Broken(StoreError::Unavailable("etcd closed the watch".into()))
            }
            Err(e) => return StreamEnd::Broken(e),
        };
        buf.extend_from_slice(&chunk);
        if buf.len() > MAX_ANSWER {
            return StreamEnd::Broken(StoreError::Corrupt("etcd watch message too large".into()));
        }
        // The gateway writes one JSON object per message; take every complete one.
        let mut values = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
        let mut taken = 0;
        let mut messages = Vec::new();
        loop {
            match values.next() {
                Some(Ok(v)) => {
                    taken = values.byte_offset();
                    messages.push(v);
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => {
                    return StreamEnd::Broken(StoreError::Corrupt(format!(
                        "etcd watch message is not JSON: {e}"
                    )))
                }
                None => break,
            }
        }
        buf.drain(..taken);
        for m in messages {
            let r = &m["result"];
            if r.is_null() {
                let detail = m["error"]["message"].as_str().unwrap_or("error").to_owned();
                return StreamEnd::Broken(StoreError::Unavailable(format!("etcd watch: {detail}")));
            }
            if num(&r["compact_revision"]).unwrap_or(0) > 0 {
                return StreamEnd::Compacted;
            }
            if r["created"] == true && !*reachable {
                *reachable = true;
                if tx.send(WatchEvent::Resumed).await.is_err() {
                    return StreamEnd::Closed;
                }
            }
            if r["canceled"] == true {
                let detail = r["cancel_reason"].as_str().unwrap_or("canceled").to_owned();
                return StreamEnd::Broken(StoreError::Unavailable(format!("etcd watch: {detail}")));
            }
            let mut changes = Vec::new();
            for ev in r["events"].as_array().into_iter().flatten() {
                let kv = &ev["kv"];
                if let Some(rev) = num(&kv["mod_revision"]) {
                    *revision = Some(revision.map_or(rev, |r| r.max(rev)));
                }
                let Some(rid) = kv["key"]
                    .as_str()
                    .and_then(unb64)
                    .and_then(|k| String::from_utf8(k).ok())
                    .and_then(|k| k.strip_prefix(&prefix).map(str::to_owned))
                else {
                    continue;
                };
                if ev["type"] == "DELETE" {
                    changes.push(Change::Removed { rid });
                } else if let Some(d) = kv_descriptor(kv) {
                    changes.push(Change::Put(d));
                } else {
                    // Unusable: as if it were not there.
                    changes.push(Change::Removed { rid });
                }
            }
            if let Some(rev) = num(&r["header"]["revision"]) {
                if !changes.is_empty() {
                    *revision = Some(revision.map_or(rev, |r| r.max(rev)));
                }
            }
            if !changes.is_empty() && tx.send(WatchEvent::Delta(changes)).await.is_err() {
                return StreamEnd::Closed;
            }
        }
    }
}

/// The descriptor in a key-value of the range or watch answer, if usable.
fn kv_descriptor(kv: &Value) -> Option<Descriptor> {
    let value = unb64(kv["value"].as_str()?)?;
    match Descriptor::from_json(&value) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(error = %e, "descriptor in etcd skipped");
            None
        }
    }
}

/// An int64 of the gateway's JSON (written as a string) or a plain number.
fn num(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// The end of the key range of every key starting with `prefix` (etcd's rule: the prefix
/// with its last byte below 0xff incremented).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (the gateway's encoding of bytes).
fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); `None` on any other character.
fn unb64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|b| *b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// One HTTP/1.1 exchange with an etcd member: a POST, then its answer as it arrives.
struct HttpStream {
    reader: BufReader<TcpStream>,
    status: u16,
    chunked: bool,
    /// Bytes of the body left to read (Content-Length), if known.
    left: Option<usize>,
    done: bool,
}

impl HttpStream {
    async fn post(host: &str, path: &str, body: &str) -> Result<HttpStream, StoreError> {
        let unavailable = |e: std::io::Error| StoreError::Unavailable(format!("etcd {host}: {e}"));
        let mut tcp = TcpStream::connect(host).await.map_err(unavailable)?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(request.as_bytes())
            .await
            .map_err(unavailable)?;
        let mut reader = BufReader::new(tcp);
        let mut line = String::new();
        reader.read_line(&mut line).await.map_err(unavailable)?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| StoreError::Unavailable(format!("etcd {host}: not HTTP: {line:?}")))?;
        let (mut chunked, mut left) = (false, None);
        loop {
            line.clear();
            let n = reader.read_line(&mut line).await.map_err(unavailable)?;
            if n == 0 || line == "\r\n" || line == "\n" {
                break;
            }
            if line.len() > 8192 {
                return Err(StoreError::Unavailable(format!(
                    "etcd {host}: header too long"
                )));
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("transfer-encoding:") {
                chunked = v.contains("chunked");
            } else if let Some(v) = lower.strip_prefix("content-length:") {
                left = v.trim().parse().ok();
            }
        }
        Ok(HttpStream {
            reader,
            status,
            chunked,
            left,
            done: false,
        })
    }

    /// The next piece of the body; `None` at its end.
    async fn next_bytes(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        let io = |e: std::io::Error| StoreError::Unavailable(format!("etcd: {e}"));
        if self.done {
            return Ok(None);
        }
        if self.chunked {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.map_err(io)? == 0 {
                return Err(StoreError::Unavailable("etcd: connection closed".into()));
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| StoreError::Unavailable(format!("etcd: bad chunk size {line:?}")))?;
            if size == 0 {
                self.done = true;
                return Ok(None);
            }
            if size > MAX_ANSWER {
                return Err(StoreError::Corrupt("etcd chunk too large".into()));
            }
            let mut data = vec![0u8; size + 2];
            self.reader.read_exact(&mut data).await.map_err(io)?;
            data.truncate(size);
            return Ok(Some(data));
        }
        let mut data = vec![0u8; 64 * 1024];
        let want = self.left.map_or(data.len(), |l| l.min(data.len()));
        if want == 0 {
            self.done = true;
            return Ok(None);
        }
        let n = self.reader.read(&mut data[..want]).await.map_err(io)?;
        if n == 0 {
            self.done = true;
            return match self.left {
                Some(l) if l > 0 => Err(StoreError::Unavailable("etcd: answer cut short".into())),
                _ => Ok(None),
            };
        }
        if let Some(l) = self.left.as_mut() {
            *l -= n;
        }
        data.truncate(n);
        Ok(Some(data))
    }

    async fn read_all(&mut self) -> Result<Vec<u8>, StoreError> {
        let mut out = Vec::new();
        while let Some(piece) = self.next_bytes().await? {
            out.extend_from_slice(&piece);
            if out.len() > MAX_ANSWER {
                return Err(StoreError::Corrupt("etcd answer too large".into()));
            }
        }
        Ok(out)
    }

    /// An error for a non-200 answer: etcd's message for a refused request.
    fn check_status(&self, body: &[u8]) -> Result<(), StoreError> {
        if self.status == 200 {
            return Ok(());
        }
        let message = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| {
                v["message"]
                    .as_str()
                    .or(v["error"].as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        if self.status >= 500 && !message.contains("not found") {
            Err(StoreError::Unavailable(format!(
                "etcd answered {}: {message}",
                self.status
            )))
        } else {
            Err(StoreError::Corrupt(format!(
                "etcd refused the request ({}): {message}",
                self.status
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_the_standard() {
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"bar!"), "YmFyIQ==");
        assert_eq!(b64(b"/zmesh/nodes/"), "L3ptZXNoL25vZGVzLw==");
        for data in [&b""[..], b"a", b"ab", b"abc", b"\xff\x00\x10zz"] {
            assert_eq!(unb64(&b64(data)).as_deref(), Some(data));
        }
        assert_eq!(unb64("not*base64"), None);
    }

    #[test]
    fn prefix_end_follows_etcd() {
        assert_eq!(prefix_end(b"/zmesh/nodes/"), b"/zmesh/nodes0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn gateway_numbers_are_strings_or_numbers() {
        assert_eq!(
            num(&json!("7587835378470372103")),
            Some(7587835378470372103)
        );
        assert_eq!(num(&json!(20)), Some(20));
        assert_eq!(num(&json!(null)), None);
    }
}
