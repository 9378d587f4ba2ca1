//! The etcd v3 descriptor store, for many hosts (MISSION D2, H1).
//!
//! It speaks etcd's gRPC API through the `etcd-client` crate (tonic over HTTP/2), in plain
//! text or over TLS (rustls: a CA to verify the members by, optionally a client certificate
//! and key for etcd's `--client-cert-auth`), with or without etcd's user/password
//! authentication ([`EtcdOptions`], configured in `[discovery.tls]` and `[discovery.auth]`,
//! see [`crate::config::DiscoveryConfig`]). A refused handshake or password is a typed
//! error ([`StoreError::Tls`] with a [`TlsFailure`], [`StoreError::Auth`]), never a bare
//! "unavailable".
//!
//! # Members and failover
//!
//! Each member of the URL has a client of its own (one HTTP/2 connection), made on first use
//! and made again after any failure. A request goes to the member that answered last, and
//! on failure to the others in turn: first those that have not failed since they last
//! answered, then those that have, the one that failed longest ago first (`MemberOrder`).
//! A TCP connect is bounded by [`ETCD_CONNECT_TIMEOUT`]; the TLS handshake and the
//! authentication of a new client, and each request, by [`ETCD_REQUEST_TIMEOUT`]: a member
//! that cannot be reached (a cut link, where a TCP connect is not refused but left
//! unanswered) costs one connect timeout, so that a pass over three members fits in one store
//! operation ([`crate::runtime::discovery::STORE_OP_BOUND`]). The lease and the watch share
//! one client per member (one connection, one authentication). Requests carry etcd's
//! "require leader" flag: a member cut off from its cluster's leader refuses at once instead
//! of answering from a stale view, and ends the watches it serves; that refusal counts as
//! the member failing, and the next member is tried. The
//! connection of a watch is probed with HTTP/2 pings every [`WATCH_PING_INTERVAL`] while the
//! watch is open, so that a member gone silent (host down, link cut) is noticed within that
//! interval plus [`ETCD_REQUEST_TIMEOUT`]; a watch that breaks after it had been open is
//! opened again on the next member at once, and reports the store unreachable only when no
//! member takes it.
//!
//! Once a member answers again after an outage (a partition healed, etcd restarted), the
//! node's store operations succeed within [`ETCD_RESUME_BOUND`] (its doc says when that
//! holds): the attempt in flight ends within a connect timeout, the operation it belongs to,
//! if no member is left to try, is tried again [`STORE_RETRY`] later, and that try reaches
//! the answering member with a new client (a connect timeout, then a request timeout for
//! TLS and authentication) and a request (a request timeout).
//!
//! With authentication, each client authenticates with its member when it is made and again
//! when etcd says its token expired.
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
//! expiry is "not before", never a precise clock. etcd reports a lease's remaining time in
//! whole seconds: [`Entry::lease_age_ms`] and [`Entry::expires_in_ms`] of this store are in
//! milliseconds with a resolution of one second.
//!
//! # Watch
//!
//! The watch reads the whole prefix (a [`WatchEvent::Reload`] at revision R), then watches
//! from R + 1: every later change arrives once, in order. When the stream breaks it says so
//! ([`WatchEvent::Unreachable`]) and resumes from the last revision it delivered
//! ([`WatchEvent::Resumed`] once it is back: nothing missed, nothing repeated). When etcd has
//! compacted its history past that revision (etcd#8668) it reads everything again
//! ([`WatchEvent::Reload`] with [`ReloadReason::Compacted`]) and watches from there.

mod members;

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, ConnectOptions, EventType, GetOptions, Identity, KeyValue, PutOptions,
    TlsOptions, WatchOptions, WatchStream,
};
use tokio::sync::mpsc;

use super::{
    Change, Descriptor, Entry, Lease, ReloadReason, RenewOutcome, Store, StoreError, StoreFuture,
    TlsFailure, Watch, WatchEvent,
};
use crate::config::DiscoveryConfig;
use crate::proto::discovery::STORE_RETRY;
use members::MemberOrder;

/// Longest wait for the TCP connect to one etcd member. A member behind a cut link (whose
/// connect is neither accepted nor refused) costs this much per attempt.
pub const ETCD_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest wait for one request to one etcd member: sending, and the whole answer. A new
/// client's TLS handshake and authentication count as one request after its TCP connect.
pub const ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest wait for a new client of one etcd member: its TCP connect, then its TLS handshake
/// and authentication.
const CLIENT_TIMEOUT: Duration =
    Duration::from_secs(ETCD_CONNECT_TIMEOUT.as_secs() + ETCD_REQUEST_TIMEOUT.as_secs());

/// Longest time from the first etcd member answering again after an outage to the node's
/// store operations succeeding again (publishing resumed, the watch back), where the outage
/// left every member unreachable or refusing at once (no leader) and the members that do not
/// answer yet still refuse at once: a partition healed (the minority's member refuses until
/// it has caught up), etcd restarted. It is the attempt in flight (a connect to a member that
/// was unreachable, [`ETCD_CONNECT_TIMEOUT`]), the pause before its operation, if no member
/// was left to try, is tried again ([`STORE_RETRY`]), and that try's new client (its connect,
/// [`ETCD_CONNECT_TIMEOUT`], and authentication, [`ETCD_REQUEST_TIMEOUT`]) and request
/// ([`ETCD_REQUEST_TIMEOUT`]).
pub const ETCD_RESUME_BOUND: Duration = Duration::from_secs(
    ETCD_CONNECT_TIMEOUT.as_secs()
        + STORE_RETRY.as_secs()
        + CLIENT_TIMEOUT.as_secs()
        + ETCD_REQUEST_TIMEOUT.as_secs(),
);

/// Interval of the HTTP/2 pings on a member's connection while a watch is open on it. Above
/// etcd's `--grpc-keepalive-min-time` (5 s by default), below which etcd takes pings for
/// abuse and closes the connection.
pub const WATCH_PING_INTERVAL: Duration = Duration::from_secs(6);

/// Largest answer read from etcd (a range of every descriptor of a large mesh fits).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// A secret (a password, a private key): kept for use, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The secret itself.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// TLS to the etcd members: the CA that signed their certificates, optionally this node's
/// client certificate and key, optionally the name their certificates must carry.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdTls {
    ca_pem: Vec<u8>,
    client: Option<(Vec<u8>, Secret<Vec<u8>>)>,
    server_name: Option<String>,
}

impl EtcdTls {
    /// Members verified by the CA certificate(s) `ca_pem` (PEM), by the host of each
    /// member's endpoint (a DNS name or an IP address in the certificate).
    pub fn new(ca_pem: Vec<u8>) -> EtcdTls {
        EtcdTls {
            ca_pem,
            client: None,
            server_name: None,
        }
    }

    /// Presents the client certificate `cert_pem` with its private key `key_pem` (PEM both),
    /// for members that require one (`--client-cert-auth`).
    pub fn with_client_certificate(mut self, cert_pem: Vec<u8>, key_pem: Secret<Vec<u8>>) -> Self {
        self.client = Some((cert_pem, key_pem));
        self
    }

    /// Verifies every member's certificate against `name` instead of its endpoint's host.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    fn tonic(&self, host: &str) -> TlsOptions {
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.client {
            tls = tls.identity(Identity::from_pem(cert, key.expose()));
        }
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => host_of(host).to_owned(),
        };
        tls.domain_name(name)
    }
}

impl fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdTls")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("client_certificate", &self.client.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// How the store reaches etcd beyond the endpoints of its URL: TLS and authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdOptions {
    tls: Option<EtcdTls>,
    credentials: Option<(String, Secret<String>)>,
}

impl EtcdOptions {
    /// Plain text, no authentication.
    pub fn new() -> EtcdOptions {
        EtcdOptions::default()
    }

    /// Every member over TLS.
    pub fn with_tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticates as `user` with `password` (etcd's `auth enable`).
    pub fn with_credentials(mut self, user: impl Into<String>, password: Secret<String>) -> Self {
        self.credentials = Some((user.into(), password));
        self
    }

    /// The options `[discovery.tls]` and `[discovery.auth]` of `d` name: reads the
    /// certificate and key files (paths as [`crate::config::NodeConfig::from_file`] resolved
    /// them) and the password (its file, or its environment variable).
    ///
    /// # Errors
    /// [`StoreError::Settings`] for a file that cannot be read or holds no PEM block of the
    /// expected kind, or a password variable that is not set.
    pub fn from_config(d: &DiscoveryConfig) -> Result<EtcdOptions, StoreError> {
        let mut options = EtcdOptions::new();
        if let Some(t) = &d.tls {
            let ca = read_pem(&t.ca_file, "ca_file", "CERTIFICATE")?;
            let mut tls = EtcdTls::new(ca);
            match (&t.cert_file, &t.key_file) {
                (Some(cert), Some(key)) => {
                    let cert = read_pem(cert, "cert_file", "CERTIFICATE")?;
                    let key = read_pem(key, "key_file", "PRIVATE KEY")?;
                    tls = tls.with_client_certificate(cert, Secret::new(key));
                }
                (None, None) => {}
                _ => {
                    return Err(StoreError::Settings(
                        "[discovery.tls]: cert_file and key_file go together".into(),
                    ))
                }
            }
            if let Some(name) = &t.server_name {
                tls = tls.with_server_name(name.clone());
            }
            options = options.with_tls(tls);
        }
        if let Some(a) = &d.auth {
            let password = match (&a.password_file, &a.password_env) {
                (Some(file), None) => {
                    let text = std::fs::read_to_string(file).map_err(|e| {
                        StoreError::Settings(format!(
                            "[discovery.auth] password_file {}: {e}",
                            file.display()
                        ))
                    })?;
                    text.trim_end_matches(['\n', '\r']).to_owned()
                }
                (None, Some(var)) => std::env::var(var).map_err(|_| {
                    StoreError::Settings(format!(
                        "[discovery.auth] password_env: the variable {var} is not set"
                    ))
                })?,
                _ => {
                    return Err(StoreError::Settings(
                        "[discovery.auth]: give one of password_file and password_env".into(),
                    ))
                }
            };
            options = options.with_credentials(a.user.clone(), Secret::new(password));
        }
        Ok(options)
    }

    fn connect(&self, host: &str) -> ConnectOptions {
        let mut o = ConnectOptions::new()
            .with_connect_timeout(ETCD_CONNECT_TIMEOUT)
            .with_keep_alive(WATCH_PING_INTERVAL, ETCD_REQUEST_TIMEOUT)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if let Some(tls) = &self.tls {
            o = o.with_tls(tls.tonic(host));
        }
        if let Some((user, password)) = &self.credentials {
            o = o
                .with_user(user.clone(), password.expose().clone())
                .with_auto_token_refresh(true);
        }
        o
    }

    fn url(&self, host: &str) -> String {
        match self.tls {
            Some(_) => format!("https://{host}"),
            None => format!("http://{host}"),
        }
    }
}

/// The contents of the PEM file `path` (setting `what`), which must hold a block whose label
/// ends in `label`.
fn read_pem(path: &Path, what: &str, label: &str) -> Result<Vec<u8>, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| {
        StoreError::Settings(format!("[discovery.tls] {what} {}: {e}", path.display()))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text.lines().any(|l| {
        l.strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
            .is_some_and(|l| l.ends_with(label))
    });
    if !found {
        return Err(StoreError::Settings(format!(
            "[discovery.tls] {what} {}: no PEM {label} in it",
            path.display()
        )));
    }
    Ok(bytes)
}

/// `m` locked; a panic elsewhere while it was held left nothing half-changed (every change
/// under it is one assignment), so a poisoned lock is used as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The host of `host:port` (an IPv6 address without its brackets).
fn host_of(endpoint: &str) -> &str {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(host, _port)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The etcd v3 descriptor store (see the module doc). Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    members: Vec<Member>,
    /// Key prefix, ending in `/`.
    prefix: String,
    options: EtcdOptions,
    /// The order in which the members are tried.
    order: Mutex<MemberOrder>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("members", &self.members)
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// One etcd member and its client, once made.
struct Member {
    /// `host:port`.
    host: String,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.host)
    }
}

impl EtcdStore {
    /// A store on the etcd members `endpoints` (`host:port`) under key `prefix`, in plain
    /// text without authentication. Nothing is contacted yet.
    pub fn new(endpoints: Vec<String>, prefix: String) -> EtcdStore {
        EtcdStore::with_options(endpoints, prefix, EtcdOptions::new())
    }

    /// A store on the etcd members `endpoints` (`host:port`) under key `prefix`, reached as
    /// `options` say. Nothing is contacted yet.
    pub fn with_options(endpoints: Vec<String>, prefix: String, options: EtcdOptions) -> Self {
        let mut prefix = prefix;
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let members: Vec<Member> = endpoints
            .into_iter()
            .map(|host| Member {
                host,
                client: tokio::sync::Mutex::new(None),
            })
            .collect();
        let order = Mutex::new(MemberOrder::new(members.len()));
        EtcdStore {
            inner: Arc::new(Inner {
                members,
                prefix,
                options,
                order,
            }),
        }
    }

    fn key(&self, rid: &str) -> String {
        format!("{}nodes/{rid}", self.inner.prefix)
    }

    fn nodes_prefix(&self) -> String {
        format!("{}nodes/", self.inner.prefix)
    }

    /// The client of `member`, made (connected, authenticated) within `CLIENT_TIMEOUT` if
    /// there is none. The slot is held while connecting, so that the lease and the watch
    /// share one connection and one authentication per member: a request that finds a
    /// connect under way waits for it (each connect is bounded, and a member that cannot be
    /// reached costs the TCP connect timeout, never the request timeout).
    async fn client(&self, member: &Member) -> Result<Client, StoreError> {
        let mut slot = member.client.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let options = &self.inner.options;
        let url = options.url(&member.host);
        let connect = Client::connect([url], Some(options.connect(&member.host)));
        let client = match tokio::time::timeout(CLIENT_TIMEOUT, connect).await {
            Ok(made) => made.map_err(|e| classify(&member.host, e))?,
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "etcd {}: not connected and authenticated within {CLIENT_TIMEOUT:?}",
                    member.host
                )))
            }
        };
        Ok(slot.insert(client).clone())
    }

    /// Member `idx` failed: its client is dropped (the next request makes a new one) and it
    /// goes to the back of the order.
    async fn failed(&self, idx: usize) {
        if let Some(member) = self.inner.members.get(idx) {
            member.client.lock().await.take();
        }
        lock(&self.inner.order).failed(idx, Instant::now());
    }

    /// Member `idx` answered: it is tried first from now on.
    fn answered(&self, idx: usize) {
        lock(&self.inner.order).answered(idx);
    }

    /// The members, in the order to try them now.
    fn order(&self) -> Vec<usize> {
        lock(&self.inner.order).order()
    }

    /// One request, to the members in their order (see the module doc) until one answers.
    async fn call<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = StoreError::Unavailable("no etcd endpoint".into());
        for idx in self.order() {
            let Some(member) = self.inner.members.get(idx) else {
                continue;
            };
            let attempt = async {
                let client = self.client(member).await?;
                match tokio::time::timeout(ETCD_REQUEST_TIMEOUT, op(client)).await {
                    Ok(answer) => answer.map_err(|e| classify(&member.host, e)),
                    Err(_) => Err(StoreError::Unavailable(format!(
                        "etcd {}: no answer within {ETCD_REQUEST_TIMEOUT:?}",
                        member.host
                    ))),
                }
            };
            match attempt.await {
                Ok(v) => {
                    self.answered(idx);
                    return Ok(v);
                }
                // The member answered, refusing the request itself: not a failure of the
                // member, which keeps its client and its place.
                Err(e @ StoreError::Corrupt(_)) => last = e,
                Err(e) => {
                    self.failed(idx).await;
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Every descriptor under the prefix, with its lease id, and the revision read at.
    async fn range_all(&self) -> Result<(Vec<(Descriptor, i64)>, i64), StoreError> {
        let prefix = self.nodes_prefix();
        let answer = self
            .call(|c| {
                let prefix = prefix.clone();
                async move {
                    c.kv_client()
                        .max_decoding_message_size(MAX_ANSWER)
                        .get(prefix, Some(GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let revision = answer.header().map_or(0, |h| h.revision());
        let out = answer
            .kvs()
            .iter()
            .filter_map(|kv| kv_descriptor(kv).map(|d| (d, kv.lease())))
            .collect();
        Ok((out, revision))
    }
}

impl Store for EtcdStore {
    fn put(&self, descriptor: &Descriptor, ttl: Duration) -> StoreFuture<'_, Lease> {
        let d = descriptor.clone();
        Box::pin(async move {
            let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
            let grant = self
                .call(|mut c| async move { c.lease_grant(secs, None).await })
                .await?;
            let id = grant.id();
            if id == 0 || grant.ttl() <= 0 {
                return Err(StoreError::Unavailable(format!(
                    "etcd granted no lease: {}",
                    grant.error()
                )));
            }
            let (key, value) = (self.key(&d.rid), d.to_json());
            self.call(|mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move {
                    c.put(key, value, Some(PutOptions::new().with_lease(id)))
                        .await
                }
            })
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
            let id = lease.id;
            // Opening the keep-alive stream sends one keep-alive and reads its answer; the
            // stream closes when dropped. An expired or unknown lease is answered with a TTL
            // of 0, which the client reports as "lease not found".
            let kept = self
                .call(|mut c| async move {
                    match c.lease_keep_alive(id).await {
                        Ok(_) => Ok(true),
                        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                        Err(e) => Err(e),
                    }
                })
                .await?;
            if !kept {
                return Ok(RenewOutcome::Lost);
            }
            let key = self.key(&lease.rid);
            let answer = self
                .call(|mut c| {
                    let key = key.clone();
                    async move { c.get(key, None).await }
                })
                .await?;
            let Some(kv) = answer.kvs().first() else {
                return Ok(RenewOutcome::Lost);
            };
            match kv_descriptor(kv) {
                Some(d) if d.generation != lease.generation => Ok(RenewOutcome::Superseded {
                    generation: d.generation,
                }),
                Some(_) if kv.lease() == lease.id => Ok(RenewOutcome::Renewed),
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
            self.call(|mut c| async move {
                match c.lease_revoke(id).await {
                    Ok(_) => Ok(()),
                    Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            })
            .await
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<Entry>> {
        Box::pin(async move {
            let (descriptors, _) = self.range_all().await?;
            let mut out = Vec::new();
            for (descriptor, lease) in descriptors {
                let ttl = self
                    .call(|mut c| async move { c.lease_time_to_live(lease, None).await })
                    .await
                    .ok();
                let left = ttl.as_ref().map(|t| t.ttl()).filter(|t| *t >= 0);
                let granted = ttl.as_ref().map(|t| t.granted_ttl());
                // etcd counts in whole seconds.
                let ms = |s: i64| u64::try_from(s).unwrap_or(0).saturating_mul(1000);
                out.push(Entry {
                    descriptor,
                    lease_age_ms: match (granted, left) {
                        (Some(g), Some(l)) => Some(ms(g.saturating_sub(l))),
                        _ => None,
                    },
                    expires_in_ms: left.map(ms),
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
        let hosts: Vec<&str> = self.inner.members.iter().map(|m| m.host.as_str()).collect();
        format!("etcd://{}{}", hosts.join(","), self.inner.prefix)
    }
}

/// A store error for an etcd client error of the member `host`: the TLS failure or the
/// refused credentials when it is one of those, by the gRPC code otherwise.
fn classify(host: &str, e: etcd_client::Error) -> StoreError {
    if let Some(failure) = tls_failure(&e) {
        return StoreError::Tls {
            endpoint: host.to_owned(),
            failure,
        };
    }
    match &e {
        etcd_client::Error::GRpcStatus(s) => {
            let message = s.message();
            let auth = matches!(
                s.code(),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ) || (s.code() == tonic::Code::InvalidArgument
                && (message.contains("authentication failed") || message.contains("user name")))
                || message.contains("authentication is not enabled");
            if auth {
                return StoreError::Auth {
                    endpoint: host.to_owned(),
                    detail: message.to_owned(),
                };
            }
            match s.code() {
                tonic::Code::InvalidArgument
                | tonic::Code::FailedPrecondition
                | tonic::Code::OutOfRange
                | tonic::Code::AlreadyExists
                | tonic::Code::Unimplemented => {
                    StoreError::Corrupt(format!("etcd {host} refused the request: {message}"))
                }
                _ => StoreError::Unavailable(format!("etcd {host}: {}", describe(&e))),
            }
        }
        _ => StoreError::Unavailable(format!("etcd {host}: {}", describe(&e))),
    }
}

/// `e` in one line: the status's message or the error, then each cause's own words.
fn describe(e: &etcd_client::Error) -> String {
    let (mut out, mut cause) = match e {
        etcd_client::Error::GRpcStatus(s) => (s.message().to_owned(), std::error::Error::source(s)),
        etcd_client::Error::TransportError(t) => (t.to_string(), std::error::Error::source(t)),
        other => (other.to_string(), None),
    };
    while let Some(c) = cause {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cause = c.source();
    }
    out
}

/// The TLS failure somewhere in the causes of `e`, if it is one.
fn tls_failure(e: &etcd_client::Error) -> Option<TlsFailure> {
    use rustls::{AlertDescription, CertificateError};
    // The client's error names no source of its own: start from the status or transport
    // error it carries.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(s) => Some(s),
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::IoError(io) => Some(io),
        other => Some(other),
    };
    while let Some(c) = cause {
        let found = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(r) = found {
            return Some(match r {
                rustls::Error::InvalidCertificate(ce) => match ce {
                    CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                        TlsFailure::UnknownIssuer
                    }
                    CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                        TlsFailure::Expired
                    }
                    CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                        TlsFailure::NotValidYet
                    }
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. } => {
                        TlsFailure::NameMismatch(r.to_string())
                    }
                    _ => TlsFailure::Other(r.to_string()),
                },
                rustls::Error::AlertReceived(
                    a @ (AlertDescription::BadCertificate
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateRevoked
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::UnknownCA
                    | AlertDescription::CertificateRequired
                    | AlertDescription::UnsupportedCertificate
                    | AlertDescription::AccessDenied),
                ) => TlsFailure::ClientCertificateRefused(format!("{a:?}")),
                _ => TlsFailure::Other(r.to_string()),
            });
        }
        cause = c.source();
    }
    None
}

/// Why a watch stream ended.
enum StreamEnd {
    /// etcd compacted its history past the revision asked for.
    Compacted,
    /// No member took the watch (each failed or refused it).
    NotOpened(StoreError),
    /// The stream broke (connection lost, member down, an error answer, no leader) after it
    /// had been open for `lived`.
    Broken { error: StoreError, lived: Duration },
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
            // A stream that had been working broke: the next member is asked at once, and
            // the store counts as unreachable only if none takes the watch. A stream that
            // breaks sooner waits like one that never opened, so that a member accepting
            // watches only to end them cannot make this loop spin.
            StreamEnd::Broken { lived, .. } if lived >= STORE_RETRY => {}
            StreamEnd::NotOpened(e) | StreamEnd::Broken { error: e, .. } => {
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

/// The watch of the prefix from `from + 1`, opened on the first member in the order that
/// takes it (each attempt bounded like a request), and that member's index.
async fn open_watch(
    store: &EtcdStore,
    prefix: &str,
    from: i64,
) -> Result<(usize, WatchStream), StoreError> {
    let mut last = StoreError::Unavailable("no etcd endpoint".into());
    for idx in store.order() {
        let Some(member) = store.inner.members.get(idx) else {
            continue;
        };
        let attempt = async {
            let client = store.client(member).await?;
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(from + 1);
            let mut watch = client.watch_client().max_decoding_message_size(MAX_ANSWER);
            match tokio::time::timeout(ETCD_REQUEST_TIMEOUT, watch.watch(prefix, Some(options)))
                .await
            {
                Ok(opened) => opened.map_err(|e| classify(&member.host, e)),
                Err(_) => Err(StoreError::Unavailable(format!(
                    "etcd {}: watch not opened within {ETCD_REQUEST_TIMEOUT:?}",
                    member.host
                ))),
            }
        };
        match attempt.await {
            Ok(stream) => {
                store.answered(idx);
                return Ok((idx, stream));
            }
            Err(e) => {
                store.failed(idx).await;
                last = e;
            }
        }
    }
    Err(last)
}

/// Watches the prefix from `from + 1` (see [`open_watch`]) and hands every change on,
/// advancing `revision`. A stream that breaks sends its member to the back of the order.
async fn stream_changes(
    store: &EtcdStore,
    from: i64,
    tx: &mpsc::Sender<WatchEvent>,
    revision: &mut Option<i64>,
    reachable: &mut bool,
) -> StreamEnd {
    let prefix = store.nodes_prefix();
    let (idx, mut stream) = match open_watch(store, &prefix, from).await {
        Ok(opened) => opened,
        Err(e) => return StreamEnd::NotOpened(e),
    };
    let host = store
        .inner
        .members
        .get(idx)
        .map_or("?", |m| m.host.as_str());
    let opened = Instant::now();
    let broken = |error: StoreError| async move {
        store.failed(idx).await;
        StreamEnd::Broken {
            error,
            lived: opened.elapsed(),
        }
    };
    loop {
        let message = tokio::select! {
            m = stream.message() => m,
            _ = tx.closed() => return StreamEnd::Closed,
        };
        let r = match message {
            Ok(Some(r)) => r,
            Ok(None) => {
                return broken(StoreError::Unavailable(format!(
                    "etcd {host}: the watch was closed"
                )))
                .await;
            }
            Err(e) => return broken(classify(host, e)).await,
        };
        if r.compact_revision() > 0 {
            return StreamEnd::Compacted;
        }
        if r.created() && !*reachable {
            *reachable = true;
            if tx.send(WatchEvent::Resumed).await.is_err() {
                return StreamEnd::Closed;
            }
        }
        if r.canceled() {
            return broken(StoreError::Unavailable(format!(
                "etcd {host}: watch canceled: {}",
                r.cancel_reason()
            )))
            .await;
        }
        let mut changes = Vec::new();
        for ev in r.events() {
            let Some(kv) = ev.kv() else { continue };
            let rev = kv.mod_revision();
            *revision = Some(revision.map_or(rev, |r| r.max(rev)));
            let Some(rid) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(&prefix))
                .map(str::to_owned)
            else {
                continue;
            };
            match ev.event_type() {
                EventType::Delete => changes.push(Change::Removed { rid }),
                EventType::Put => match kv_descriptor(kv) {
                    Some(d) => changes.push(Change::Put(d)),
                    // Unusable: as if it were not there.
                    None => changes.push(Change::Removed { rid }),
                },
            }
        }
        if let Some(rev) = r.header().map(|h| h.revision()) {
            if !changes.is_empty() {
                *revision = Some(revision.map_or(rev, |r| r.max(rev)));
            }
        }
        if !changes.is_empty() && tx.send(WatchEvent::Delta(changes)).await.is_err() {
            return StreamEnd::Closed;
        }
    }
}

/// The descriptor in a key-value of a range or watch answer, if usable.
fn kv_descriptor(kv: &KeyValue) -> Option<Descriptor> {
    match Descriptor::from_json(kv.value()) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(error = %e, "descriptor in etcd skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h1_f5_a_pass_reaches_the_third_member_past_two_unreachable_ones() {
        // Two members cut off cost a connect timeout each; the third must still be connected
        // and asked within one store operation, or a partition of two members would hide
        // the one that answers.
        use crate::runtime::discovery::STORE_OP_BOUND;
        assert!(3 * ETCD_CONNECT_TIMEOUT < STORE_OP_BOUND);
        assert_eq!(
            ETCD_RESUME_BOUND,
            2 * ETCD_CONNECT_TIMEOUT + STORE_RETRY + 2 * ETCD_REQUEST_TIMEOUT
        );
    }

    #[test]
    fn hosts_of_endpoints_name_the_certificate_to_check() {
        assert_eq!(host_of("127.0.0.1:2379"), "127.0.0.1");
        assert_eq!(host_of("etcd-1.example:2379"), "etcd-1.example");
        assert_eq!(host_of("[::1]:2379"), "::1");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let options = EtcdOptions::new()
            .with_tls(
                EtcdTls::new(b"ca".to_vec())
                    .with_client_certificate(b"cert".to_vec(), Secret::new(b"hunter2".to_vec())),
            )
            .with_credentials("zmesh", Secret::new("hunter2".to_owned()));
        let store = EtcdStore::with_options(vec!["127.0.0.1:1".into()], "/x".into(), options);
        let shown = format!("{store:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        // The key's bytes, as Debug would print a Vec<u8>.
        assert!(!shown.contains(&format!("{:?}", b"hunter2")), "{shown}");
        assert!(shown.contains("zmesh"), "{shown}");
    }
}
