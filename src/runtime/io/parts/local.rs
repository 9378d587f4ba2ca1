//! The node itself as the I/O thread knows it: its configuration, the identity it presents
//! in every handshake, its CURVE key pair, where it is in its life, and the counter its
//! connection ids come from; and the view of its configured peers and servers that admission
//! reads ([`ConfigView`]).

use crate::config::NodeConfig;
use crate::proto::handshake::Identity;
use crate::proto::node::admit::{Configured, PeerView, ServerView};
use crate::proto::node::link::LinkKind;
use crate::proto::security::PublicKey;
use crate::proto::ConnId;
use crate::runtime::link::{LinkId, MeshLane};
use crate::runtime::records::Lane;
use crate::runtime::security::KeyPair;

/// Where the node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    /// Taking new work.
    Running,
    /// Stopping gracefully: no new work, accepted calls are answered (MISSION C4, F6).
    Draining,
    /// Stopped: the loop ends.
    Stopped,
}

/// The node itself (see the module docs).
pub(crate) struct Local {
    /// The node's configuration as it started (discovery appends peers and servers).
    pub(crate) cfg: NodeConfig,
    /// The identity this node presents in its handshakes.
    pub(crate) me: Identity,
    /// CURVE: this node's key pair; `None` in `none` mode.
    pub(crate) curve: Option<KeyPair>,
    /// Where the node is in its life.
    pub(crate) host: Host,
    /// The next connection id handed out.
    next_conn: u64,
}

impl Local {
    /// A running node with configuration `cfg`, identity `me` and key pair `curve`.
    pub(crate) fn new(cfg: NodeConfig, me: Identity, curve: Option<KeyPair>) -> Local {
        Local {
            cfg,
            me,
            curve,
            host: Host::Running,
            next_conn: 1,
        }
    }

    /// A connection id never handed out before by this node.
    pub(crate) fn fresh_conn_id(&mut self) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        id
    }

    /// The configured peers and servers as admission and the calls' send policy read them.
    pub(crate) fn configured(&self) -> ConfigView<'_> {
        ConfigView {
            cfg: &self.cfg,
            curve: self.curve.is_some(),
        }
    }

    /// True once a stop began: no new work is taken.
    pub(crate) fn stopping(&self) -> bool {
        self.host != Host::Running
    }

    /// Which link of kind `kind` is, as the events and snapshot rows name it.
    pub(crate) fn link_id(&self, kind: &LinkKind) -> LinkId {
        let mesh = |lane: Lane| match lane {
            Lane::Completion => MeshLane::Completion,
            Lane::Application | Lane::ClientServer => MeshLane::Application,
        };
        match kind {
            LinkKind::MeshDial { peer, lane } => LinkId::Peer {
                rid: self
                    .cfg
                    .peers
                    .get(*peer)
                    .map_or_else(|| "?".to_owned(), |p| p.rid.clone()),
                lane: mesh(*lane),
                dialled: true,
            },
            LinkKind::ClientDial { server } => {
                let s = self.cfg.servers.get(*server);
                LinkId::Server {
                    channel: s.map_or_else(|| "?".to_owned(), |s| s.channel.clone()),
                    endpoint: s.map_or_else(|| "?".to_owned(), |s| s.endpoint.clone()),
                }
            }
            LinkKind::Inbound {
                rid,
                lane: Lane::ClientServer,
            } => LinkId::Client { rid: rid.clone() },
            LinkKind::Inbound { rid, lane } => LinkId::Peer {
                rid: rid.clone(),
                lane: mesh(*lane),
                dialled: false,
            },
        }
    }
}

/// The configured peers and servers as admission and the calls' send policy read them
/// (`batch_calls`), with the keys
/// `[security.endpoint_keys]` pins for their endpoints when the node runs CURVE.
pub(crate) struct ConfigView<'a> {
    cfg: &'a NodeConfig,
    curve: bool,
}

impl ConfigView<'_> {
    /// CURVE: the key `[security.endpoint_keys]` pins for `endpoint`, if any.
    fn pinned_key(&self, endpoint: &str) -> Option<PublicKey> {
        if !self.curve {
            return None;
        }
        self.cfg.security.endpoint_key(endpoint)
    }
}

impl Configured for ConfigView<'_> {
    fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
        let p = self.cfg.peers.get(peer)?;
        Some(PeerView {
            rid: &p.rid,
            generation: p.generation,
            security_identity: p.security_identity.as_deref(),
            pinned_key: self.pinned_key(&p.application),
        })
    }

    fn peer_index(&self, rid: &str) -> Option<usize> {
        self.cfg.peers.iter().position(|p| p.rid == rid)
    }

    fn server(&self, server: usize) -> Option<ServerView<'_>> {
        let s = self.cfg.servers.get(server)?;
        Some(ServerView {
            rid: s.rid.as_deref(),
            endpoint: &s.endpoint,
            pinned_key: self.pinned_key(&s.endpoint),
        })
    }

    fn peer_batches_calls(&self, peer: usize) -> Option<bool> {
        self.cfg.peers.get(peer).map(|p| p.batch_calls)
    }

    fn server_batches_calls(&self, server: usize) -> Option<bool> {
        self.cfg.servers.get(server).map(|s| s.batch_calls)
    }
}
