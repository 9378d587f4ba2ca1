//! File descriptors: the process's limit, how many are in use, and what running out looks
//! like.
//!
//! libzmq needs descriptors for every socket (its mailbox), every TCP connection, and every
//! context (its threads' pollers and mailboxes); README "File descriptors" gives the budget
//! per connection. A node therefore:
//!
//! - raises its soft `RLIMIT_NOFILE` to the hard limit when it starts ([`raise_limit`], once
//!   per process, as Go's runtime does), and says so in a debug line;
//! - reports the descriptors in use and the limit in its snapshot ([`open_count`],
//!   [`limit`]);
//! - names running out ([`Exhausted`]): a link that cannot open its socket fails with
//!   [`FailureReason::ResourceExhausted`](crate::proto::state::FailureReason::ResourceExhausted)
//!   and the real cause with its figures, and is retried with the normal backoff; a node that
//!   cannot open its bound sockets at start fails with that message.
//!
//! libzmq reports "no descriptor left" as `EMFILE` both for the process's limit and for a
//! context whose socket slots are all taken, and a context it could not create at all makes
//! the next socket fail with `EFAULT` ("Bad address"); [`classify`] tells them apart with the
//! figures, and the socket layer never uses a context that failed (see
//! [`Sockets`](crate::runtime::socket::Sockets)).

use std::fmt;
use std::sync::OnceLock;

/// File descriptors a dialled RouteMesh lane takes at steady state (the fd budget, README
/// "File descriptors"; measured in BENCHMARKS.md P7): the socket's mailbox and the TCP
/// connection. Its monitor is stopped once the handshake is done (the connection's loss
/// arrives in band, `ROUTER_NOTIFY`), so it takes [`FDS_PER_MONITORED`] only while it
/// connects and while it is closed. A libzmq mailbox is one eventfd on Linux (vendor/zmq-sys
/// builds libzmq with `ZMQ_HAVE_EVENTFD`) and a socket pair, two descriptors, elsewhere. An
/// inbound connection on a shared bound socket takes one (its TCP connection).
pub const FDS_PER_DIALLED: u64 = 1 + MAILBOX_FDS;
/// File descriptors a dialled socket with its monitor takes: the socket's mailbox, the
/// mailboxes of the monitor's two PAIR sockets, and the TCP connection. A ClientServer
/// client's DEALER and a fanout subscription's SUB keep their monitor (neither has
/// `ROUTER_NOTIFY`); a RouteMesh lane has one only while it connects and is closed.
pub const FDS_PER_MONITORED: u64 = 1 + 3 * MAILBOX_FDS;
/// File descriptors a libzmq context takes once it has a socket: its termination mailbox,
/// and the mailbox and poller of each of its two threads (reaper, I/O thread).
pub const FDS_PER_CONTEXT: u64 = 3 * MAILBOX_FDS + 2;
/// Descriptors of one libzmq mailbox: an eventfd on Linux, a socket pair elsewhere.
const MAILBOX_FDS: u64 = if cfg!(target_os = "linux") { 1 } else { 2 };
/// Descriptors that must be free before a new context is opened: its own, room for the
/// socket that asked for it, and two to spare. libzmq aborts the process if it cannot create
/// a context's poller, so a context is never opened closer to the limit.
pub const CONTEXT_HEADROOM: u64 = FDS_PER_CONTEXT + FDS_PER_MONITORED + 2;

/// What [`raise_limit`] found and did, in descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRaise {
    /// The soft limit before.
    pub before: u64,
    /// The soft limit after (the hard limit, where the system allows it).
    pub after: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the process's soft `RLIMIT_NOFILE` to its hard limit, once per process (later
/// calls return what the first one did), and logs the outcome at debug level. `None` where
/// the platform has no such limit or it cannot be read.
///
/// The soft limit is often 1 024 while the hard limit is far higher; a node needs about
/// [`FDS_PER_DIALLED`] descriptors per connection it
/// dials, so the soft default would cap it at a few hundred connections.
pub fn raise_limit() -> Option<LimitRaise> {
    static RAISED: OnceLock<Option<LimitRaise>> = OnceLock::new();
    *RAISED.get_or_init(|| {
        let raised = raise_now();
        match &raised {
            Ok(r) if r.after > r.before => tracing::debug!(
                before = r.before,
                after = r.after,
                hard = r.hard,
                "raised the soft RLIMIT_NOFILE to the hard limit"
            ),
            Ok(r) => tracing::debug!(
                soft = r.after,
                hard = r.hard,
                "the soft RLIMIT_NOFILE is already as high as it can be"
            ),
            Err(e) => tracing::debug!(error = %e, "RLIMIT_NOFILE not raised"),
        }
        raised.ok()
    })
}

#[cfg(unix)]
fn raise_now() -> std::io::Result<LimitRaise> {
    let (before, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    let after = rlimit::increase_nofile_limit(hard)?;
    Ok(LimitRaise {
        before,
        after,
        hard,
    })
}

#[cfg(not(unix))]
fn raise_now() -> std::io::Result<LimitRaise> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// The process's soft `RLIMIT_NOFILE` now; `None` where there is none or it cannot be read.
pub fn limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rlimit::getrlimit(rlimit::Resource::NOFILE)
            .ok()
            .map(|(soft, _)| soft)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Descriptors the process has open now: the entries of `/proc/self/fd` on Linux (less the
/// one the count itself opens); `None` elsewhere, or when it cannot be read (at the limit,
/// reading the directory needs a descriptor too: [`classify`] takes that as "at the limit").
/// Costs a directory read of one entry per descriptor.
pub fn open_count() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    let n = dir.count() as u64;
    Some(n.saturating_sub(1))
}

/// Whether the system's file table is full (`ENFILE`): `/proc/sys/fs/file-nr` on Linux.
fn system_table_full() -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/sys/fs/file-nr") else {
        return false;
    };
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().ok());
    match (it.next().flatten(), it.nth(1).flatten()) {
        (Some(allocated), Some(max)) => max > 0 && allocated >= max,
        _ => false,
    }
}

/// The descriptors open and the limit, read at most once per [`Gauge::TTL`]: a node that
/// runs out fails many socket openings in a short time, and counting `/proc/self/fd` costs
/// a directory read of one entry per descriptor.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    read: Option<(std::time::Instant, Option<u64>, Option<u64>)>,
}

impl Gauge {
    /// How long one reading is used.
    pub(crate) const TTL: std::time::Duration = std::time::Duration::from_millis(250);

    /// Descriptors open and the soft limit (each `None` if unknown), at most [`Gauge::TTL`]
    /// old.
    pub(crate) fn read(&mut self, now: std::time::Instant) -> (Option<u64>, Option<u64>) {
        match self.read {
            Some((at, open, limit)) if now.saturating_duration_since(at) < Self::TTL => {
                (open, limit)
            }
            _ => {
                let (open, limit) = (open_count(), limit());
                self.read = Some((now, open, limit));
                (open, limit)
            }
        }
    }
}

/// A socket could not be opened because the node ran out of something it needs for one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Exhausted {
    /// The process reached its descriptor limit, or is too close to it for a new libzmq
    /// context (`EMFILE`; libzmq also reports a context it could not create this way).
    #[error("too many open files: {} of {}{}{}", Figure(*open), Figure(*limit), Headroom(*open, *limit), PerConnection(*open, *base, *connections))]
    ProcessLimit {
        /// Descriptors open (the limit itself when they could not even be counted).
        open: u64,
        /// The soft limit.
        limit: u64,
        /// Connections (sockets with a peer) the node has open, for the figure per connection.
        connections: usize,
        /// Descriptors the process had open before its connections (at the node's start),
        /// left out of the figure per connection.
        base: u64,
    },
    /// The system's file table is full (`ENFILE`): no process can open a descriptor.
    #[error("the system's file table is full (ENFILE; see /proc/sys/fs/file-nr){}", Open(*open))]
    SystemTable {
        /// Descriptors this process has open, if they could be counted.
        open: Option<u64>,
    },
    /// A libzmq context has no free socket slot (`EMFILE` from libzmq with descriptors to
    /// spare); the socket layer moves on to another context, so this is seen only if that
    /// fails too.
    #[error("libzmq's socket limit per context reached ({} descriptors open of {})", Figure(*open), Figure(*limit))]
    ZmqSockets {
        /// Descriptors open.
        open: u64,
        /// The soft limit.
        limit: u64,
    },
}

/// Descriptors within this many of the limit count as "at the limit": the socket that failed
/// may have given back the few it had taken by the time they are counted, and the socket
/// layer opens no libzmq context with fewer left
/// ([`CONTEXT_HEADROOM`]).
const AT_LIMIT_MARGIN: u64 = CONTEXT_HEADROOM;

/// What a libzmq error from opening a socket says about resources: `Some` if it is running
/// out (`EMFILE`, or the `ENFILE` that the socket layer reports as `EMFILE`), `None` for any
/// other error. `connections` is the node's open connections, for the figure per connection.
/// Reads `/proc/self/fd` and `/proc/sys/fs/file-nr`: call it once per episode or rate-limit
/// it, not per failure.
pub fn classify(e: zmq::Error, connections: usize, base: u64) -> Option<Exhausted> {
    if e != zmq::Error::EMFILE {
        return None;
    }
    classify_exhausted(connections, base)
}

/// Which resource ran out, for an operation that failed for want of a descriptor or a socket
/// slot (a transport error that says so,
/// [`SocketError::is_out_of_descriptors`](crate::runtime::transport::SocketError::is_out_of_descriptors)):
/// as [`classify`] after its check of the error; `None` only where the descriptor limit
/// cannot be read.
pub fn classify_exhausted(connections: usize, base: u64) -> Option<Exhausted> {
    let open = open_count();
    if system_table_full() {
        return Some(Exhausted::SystemTable { open });
    }
    let limit = limit()?;
    // Not even the count could open its directory: at the limit.
    let open = open.unwrap_or(limit);
    Some(if open + AT_LIMIT_MARGIN >= limit {
        Exhausted::ProcessLimit {
            open,
            limit,
            connections,
            base,
        }
    } else {
        Exhausted::ZmqSockets { open, limit }
    })
}

/// As [`classify`], for an error of the operating system (the node's epoll set, a
/// descriptor libzmq did not open).
pub fn classify_io(e: &std::io::Error, connections: usize, base: u64) -> Option<Exhausted> {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    match e.raw_os_error() {
        Some(ENFILE) => Some(Exhausted::SystemTable { open: open_count() }),
        Some(EMFILE) => classify(zmq::Error::EMFILE, connections, base),
        _ => None,
    }
}

/// A count with thin groups of three digits: `19 999`.
struct Figure(u64);

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(' ');
            }
            out.push(c);
        }
        f.write_str(&out)
    }
}

/// " (too few left for a new libzmq context, which needs 16)" when some are left.
struct Headroom(u64, u64);

impl fmt::Display for Headroom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 + 2 > self.1 {
            return Ok(());
        }
        write!(
            f,
            " (too few left for a new libzmq context, which needs {})",
            CONTEXT_HEADROOM
        )
    }
}

/// "; about 6.7 per connection (2 990 connections)": the descriptors open beyond those open
/// before the connections, per connection; nothing without connections.
struct PerConnection(u64, u64, usize);

impl fmt::Display for PerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (open, base, connections) = (self.0, self.1, self.2);
        if connections == 0 {
            return Ok(());
        }
        let per = open.saturating_sub(base) as f64 / connections as f64;
        write!(
            f,
            "; about {per:.1} per connection ({} connections)",
            Figure(connections as u64)
        )
    }
}

/// " (this process has N open)" when known.
struct Open(Option<u64>);

impl fmt::Display for Open {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "; this process has {} open", Figure(n)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures read as the issue asks: grouped digits, the limit, and the count per
    /// connection.
    #[test]
    fn names_the_process_limit_with_its_figures() {
        let e = Exhausted::ProcessLimit {
            open: 19_999,
            limit: 20_000,
            connections: 2_990,
            base: 26,
        };
        assert_eq!(
            e.to_string(),
            "too many open files: 19 999 of 20 000; about 6.7 per connection (2 990 connections)"
        );
        let e = Exhausted::ProcessLimit {
            open: 63,
            limit: 64,
            connections: 0,
            base: 0,
        };
        assert_eq!(e.to_string(), "too many open files: 63 of 64");
        let e = Exhausted::ProcessLimit {
            open: 50,
            limit: 64,
            connections: 2,
            base: 36,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "too many open files: 50 of 64 (too few left for a new libzmq context, which \
                 needs {}); about 7.0 per connection (2 connections)",
                CONTEXT_HEADROOM
            )
        );
        assert_eq!(Figure(1_000_000).to_string(), "1 000 000");
        assert_eq!(Figure(999).to_string(), "999");
    }

    /// Only "no descriptor" errors are resource exhaustion; the others keep their own names.
    #[test]
    fn other_errors_are_not_exhaustion() {
        assert_eq!(classify(zmq::Error::EFAULT, 1, 0), None);
        assert_eq!(classify(zmq::Error::EINVAL, 1, 0), None);
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(classify_io(&io, 1, 0), None);
    }

    /// This test process is far from its limit: an EMFILE now is libzmq's socket limit, not
    /// the process's (Linux, where descriptors can be counted).
    #[test]
    fn emfile_with_descriptors_to_spare_is_libzmqs_socket_limit() {
        raise_limit();
        let (Some(open), Some(limit)) = (open_count(), limit()) else {
            return;
        };
        if open + 100 > limit {
            return;
        }
        assert!(matches!(
            classify(zmq::Error::EMFILE, 3, 0),
            Some(Exhausted::ZmqSockets { .. })
        ));
    }

    /// The count sees descriptors this test holds open (Linux).
    #[test]
    fn counts_open_descriptors() {
        if open_count().is_none() {
            return;
        }
        let held: Vec<std::fs::File> = (0..50)
            .map(|_| std::fs::File::open("/proc/self/status").expect("a file to open"))
            .collect();
        let during = open_count().expect("count");
        // Other tests' threads open and close descriptors too: the 50 held are certain.
        assert!(during >= 50, "{during} open while 50 are held");
        assert!(limit().is_some_and(|l| l >= during));
        drop(held);
    }
}
