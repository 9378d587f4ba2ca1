//! The descriptor store contract (MISSION D2, D3, F5), checked on the embedded SQLite store:
//! put under a lease, renew, remove, list with lease ages, and a watch that starts with a full
//! reload, then reports deltas (put, new generation, removal, expiry), says once when the
//! store cannot be read, and starts over with a reload when it can again.

mod common;

use std::time::Duration;

use common::{desc, next_watch_event, put_supersede_remove};
use zmesh::runtime::store::{
    self, Change, ReloadReason, RenewOutcome, SqliteStore, Store, StoreError, Watch, WatchEvent,
};

const BOUND: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(30);

/// A directory for one test's store, removed when the guard drops (even on a panic).
fn dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmesh-store-{name}-"))
        .tempdir()
        .expect("temp dir")
}

async fn next(w: &mut Watch) -> WatchEvent {
    next_watch_event(w, BOUND).await
}

#[tokio::test]
async fn d2_sqlite_put_list_renew_remove() {
    let tmp = dir("crud");
    let d = tmp.path();
    let store = store::open(&format!("sqlite://{}", d.join("mesh.db").display())).expect("open");
    let (lease, listed) = put_supersede_remove(store.as_ref(), TTL).await;
    assert_eq!((lease.rid.as_str(), lease.generation), ("b", 7));
    assert!(listed.lease_age_ms.expect("age") < 5_000);
    assert!(listed.expires_in_ms.expect("expiry") > 25_000);
    assert!(store.url().starts_with("sqlite://"));
}

/// A lease that is not renewed expires: the descriptor is gone for readers and watchers, and
/// its renewal answers Lost (the node then publishes again).
#[tokio::test]
async fn d3_unrenewed_lease_expires() {
    let tmp = dir("expiry");
    let d = tmp.path();
    let store = SqliteStore::new(d.join("mesh.db"));
    let mut watch = store.watch().expect("watch");
    assert!(matches!(next(&mut watch).await, WatchEvent::Reload { .. }));
    let lease = store
        .put(&desc("b", 1), Duration::from_millis(300))
        .await
        .expect("put");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Delta(vec![Change::Put(desc("b", 1))])
    );
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Delta(vec![Change::Removed { rid: "b".into() }]),
        "expiry is seen as a removal"
    );
    assert!(store.list().await.expect("list").is_empty());
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Lost));
}

#[tokio::test]
async fn d2_sqlite_watch_reload_then_deltas() {
    let tmp = dir("watch");
    let d = tmp.path();
    let store = SqliteStore::new(d.join("mesh.db"));
    store.put(&desc("a", 1), TTL).await.expect("put a");
    let mut watch = store.watch().expect("watch");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Reload {
            descriptors: vec![desc("a", 1)],
            reason: ReloadReason::Initial
        }
    );
    let b = store.put(&desc("b", 2), TTL).await.expect("put b");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Delta(vec![Change::Put(desc("b", 2))])
    );
    // Renewals are not changes.
    store.renew(&b).await.expect("renew");
    store.put(&desc("b", 3), TTL).await.expect("new generation");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Delta(vec![Change::Put(desc("b", 3))])
    );
    let a = zmesh::runtime::store::Lease {
        rid: "a".into(),
        generation: 1,
        ttl: TTL,
        id: 0,
    };
    store.remove(&a).await.expect("remove a");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Delta(vec![Change::Removed { rid: "a".into() }])
    );
}

/// MISSION F5 at the store: a store file moved away makes every operation fail (the store
/// does not create an empty file in its place) and the watch say so once; moved back, the
/// watch starts over with a reload that holds what changed meanwhile.
#[tokio::test]
async fn f5_sqlite_unavailable_then_resumed_with_a_reload() {
    let tmp = dir("outage");
    let d = tmp.path();
    let path = d.join("db").join("mesh.db");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("db dir");
    let store = SqliteStore::new(&path);
    let other = SqliteStore::new(&path);
    let lease = store.put(&desc("a", 1), TTL).await.expect("put");
    let mut watch = store.watch().expect("watch");
    assert!(matches!(next(&mut watch).await, WatchEvent::Reload { .. }));
    let away = d.join("db-away");
    std::fs::rename(d.join("db"), &away).expect("move the store away");
    assert!(matches!(
        next(&mut watch).await,
        WatchEvent::Unreachable(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.renew(&lease).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(store.list().await.is_err());
    assert!(!path.exists(), "no empty store was created in its place");
    // Meanwhile another writer changes the (moved) file.
    let moved = SqliteStore::new(away.join("mesh.db"));
    moved.put(&desc("c", 5), TTL).await.expect("put c");
    drop(moved);
    std::fs::rename(&away, d.join("db")).expect("move the store back");
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Reload {
            descriptors: vec![desc("a", 1), desc("c", 5)],
            reason: ReloadReason::Resumed
        }
    );
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    assert_eq!(other.list().await.expect("list").len(), 2);
}

#[test]
fn unknown_store_urls_are_refused() {
    assert!(matches!(
        store::open("redis://x"),
        Err(StoreError::Url { .. })
    ));
    assert!(matches!(
        store::open("sqlite://"),
        Err(StoreError::Url { .. })
    ));
}
