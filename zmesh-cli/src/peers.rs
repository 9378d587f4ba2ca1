//! `zmesh peers (--store URL | --config FILE) [--json]`: the descriptors in a discovery store
//! (MISSION D1), each with its lease age.

use std::path::PathBuf;

use anyhow::{Context, Result};
use zmesh::config::{DiscoveryConfig, NodeConfig};
use zmesh::runtime::store::{self, Entry};

use crate::output::{out, outln};

/// Prints every live descriptor of the store, as a table or as JSON: the store at `url`, or
/// the one of the `[discovery]` section of the configuration file `config` (with its TLS and
/// authentication settings; `url`, if given, replaces its URL).
pub(crate) async fn run(url: Option<String>, config: Option<PathBuf>, as_json: bool) -> Result<()> {
    let discovery = match (config, url) {
        (Some(file), url) => {
            let c = NodeConfig::from_file(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut d = c
                .discovery
                .with_context(|| format!("{} has no [discovery] section", file.display()))?;
            if let Some(url) = url {
                d.store = url;
            }
            d
        }
        (None, Some(url)) => DiscoveryConfig::new(url),
        (None, None) => anyhow::bail!("give --store URL or --config FILE"),
    };
    let url = discovery.store.clone();
    let store = store::open_config(&discovery).with_context(|| format!("opening {url}"))?;
    let entries = store
        .list()
        .await
        .with_context(|| format!("reading {url}"))?;
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&entries)?)?;
    } else {
        out!("{}", table(&entries))?;
    }
    Ok(())
}

/// The table `zmesh peers` prints.
pub(crate) fn table(entries: &[Entry]) -> String {
    let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
    let mut out = format!(
        "{:<12} {:<16} {:>10} {:>10}  {:<46} {:<24} {:<24} {}\n",
        "RID",
        "GENERATION",
        "LEASE AGE",
        "EXPIRES",
        "ROUTE MESH",
        "SERVER",
        "PUBLISHERS",
        "MEMBERSHIPS"
    );
    for e in entries {
        let d = &e.descriptor;
        let mesh = d.route_mesh.as_ref().map_or("-".to_owned(), |m| {
            format!("{} {}", m.application, m.completion)
        });
        let members: Vec<String> = d
            .memberships
            .iter()
            .map(|m| {
                let role = match m.role {
                    zmesh::proto::handshake::Role::Server => "server",
                    zmesh::proto::handshake::Role::ObjectClient => "object_client",
                };
                format!("{role}:{}", m.channel)
            })
            .collect();
        out.push_str(&format!(
            "{:<12} {:016x} {:>10} {:>10}  {:<46} {:<24} {:<24} {}\n",
            d.rid,
            d.generation,
            ms(e.lease_age_ms),
            ms(e.expires_in_ms),
            mesh,
            d.server.as_deref().unwrap_or("-"),
            if d.publishers.is_empty() {
                "-".to_owned()
            } else {
                d.publishers.join(",")
            },
            members.join(",")
        ));
    }
    if entries.is_empty() {
        out.push_str("(no live descriptor)\n");
    }
    out
}
