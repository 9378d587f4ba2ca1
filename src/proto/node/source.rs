//! Who a delivered record came from: the source the node builds once per connection or
//! subscription and hands out with each of its records.

use std::sync::Arc;

use serde::Serialize;

/// Where a delivered record came from.
///
/// The names are `Arc<str>`: every record of a connection shares one allocation, so cloning a
/// source (the runtime does once per delivery) is a reference count, not a copy. Compare with
/// `&*rid == "node-b"`, build one with `"node-b".into()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A RouteMesh peer, by RID.
    Peer {
        /// The peer's RID.
        rid: Arc<str>,
    },
    /// A ClientServer client connected to this node's server endpoint.
    Client {
        /// The client's RID.
        rid: Arc<str>,
    },
    /// A ClientServer server this node is a client of.
    Server {
        /// The server's RID.
        rid: Arc<str>,
    },
    /// A fanout publisher, by endpoint.
    Publisher {
        /// The publisher's endpoint.
        endpoint: Arc<str>,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Peer { rid } => write!(f, "peer {rid}"),
            Source::Client { rid } => write!(f, "client {rid}"),
            Source::Server { rid } => write!(f, "server {rid}"),
            Source::Publisher { endpoint } => write!(f, "publisher {endpoint}"),
        }
    }
}
