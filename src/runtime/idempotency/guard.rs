//! The guard around a non-repeatable command's handler (MISSION K3): what the runtime does
//! with the answers of an [`IdempotencyStore`] (see the table in the module docs above).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::{Begin, Fingerprint, IdempotencyStore, Outcome, Owner, RecordState, ScopedKey};
use crate::proto::calls::RemoteCode;
use crate::proto::wire::ReplyCode;
use crate::runtime::calls::{Request, ServeError};

/// A handler's answer, as the REPLY will carry it.
type Answer = Result<Bytes, ServeError>;

/// What [`Guard::run`] answers a call: the answer the REPLY will carry, and whether it is
/// a replay: the outcome of an earlier call with the same key (read from the record, or
/// taken from that call still running here) rather than a run of the handler for this call.
pub(crate) struct Guarded {
    /// The answer.
    pub(crate) answer: Answer,
    /// The handler did not run for this call: the answer is an earlier call's outcome.
    pub(crate) replayed: bool,
}

impl Guarded {
    /// An answer of this call's own (its handler's, or the guard's refusal): not a replay.
    fn own(answer: Answer) -> Guarded {
        Guarded {
            answer,
            replayed: false,
        }
    }
}

/// A guarded call running in this process: its fingerprint, and its answer once known.
struct Running {
    fingerprint: Fingerprint,
    answer: watch::Receiver<Option<Answer>>,
}

/// What [`Guard::enter`] found for a key.
enum Entry {
    /// No call of that key runs here: this one is the first; it publishes its answer.
    First(watch::Sender<Option<Answer>>),
    /// A call of that key with the same arguments runs here: wait for its answer.
    Attach(watch::Receiver<Option<Answer>>),
    /// A call of that key with other arguments runs here.
    OtherArguments,
    /// The guard's lock is poisoned (a panic while holding it).
    Broken,
}

/// One node's idempotency guard: its store, how long records are kept, who this node is, and
/// the guarded calls running here (so a repeat that arrives while the first runs gets the
/// first one's answer, instead of `UnknownOutcome`).
pub(crate) struct Guard {
    store: Arc<dyn IdempotencyStore>,
    retention: Duration,
    owner: Owner,
    running: Mutex<HashMap<ScopedKey, Running>>,
}

impl Guard {
    /// A guard over `store` for the node `owner`.
    pub(crate) fn new(
        store: Arc<dyn IdempotencyStore>,
        retention: Duration,
        owner: Owner,
    ) -> Guard {
        Guard {
            store,
            retention,
            owner,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Whether its store keeps records across a crash ([`IdempotencyStore::is_durable`]).
    pub(crate) fn is_durable(&self) -> bool {
        self.store.is_durable()
    }

    /// Runs `handler` for `req` at most once per key: the caller's idempotency key scoped to
    /// channel + method, else the request's identity (caller RID, generation, call id).
    /// The record names the caller (its RID) for an operator.
    pub(crate) async fn run<F, Fut>(&self, req: &Request, handler: F) -> Guarded
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Answer>,
    {
        let key = match req.idempotency_key() {
            Some(k) => ScopedKey::from_idempotency_key(&req.channel, &req.method, k),
            None => ScopedKey::from_request(&req.caller, req.caller_generation(), req.call_id()),
        };
        let fingerprint = Fingerprint::of_call(&req.channel, &req.method, req.raw_args());
        let tx = match self.enter(&key, fingerprint) {
            Entry::First(tx) => tx,
            Entry::Attach(mut answer) => {
                metrics::counter!("zmesh_idempotent_attached_total").increment(1);
                // The first call's answer (a replay: this call ran nothing); its task ending
                // without one may have run it.
                return match answer.wait_for(Option::is_some).await {
                    Ok(a) => match a.clone() {
                        Some(answer) => Guarded {
                            answer,
                            replayed: true,
                        },
                        None => Guarded::own(Err(lost())),
                    },
                    Err(_) => Guarded::own(Err(lost())),
                };
            }
            Entry::OtherArguments => return Guarded::own(Err(other_arguments())),
            Entry::Broken => {
                return Guarded::own(Err(unknown("the idempotency guard failed; not run")))
            }
        };
        let guarded = self.decide(&key, &fingerprint, &req.caller, handler).await;
        // Those attached to this call get its answer as a replay, whatever it was.
        let _ = tx.send(Some(guarded.answer.clone()));
        if let Ok(mut running) = self.running.lock() {
            running.remove(&key);
        }
        guarded
    }

    /// Registers the first call of `key` running here, or finds the one already running.
    fn enter(&self, key: &ScopedKey, fingerprint: Fingerprint) -> Entry {
        let Ok(mut running) = self.running.lock() else {
            return Entry::Broken;
        };
        if let Some(first) = running.get(key) {
            if first.fingerprint != fingerprint {
                return Entry::OtherArguments;
            }
            return Entry::Attach(first.answer.clone());
        }
        let (tx, rx) = watch::channel(None);
        running.insert(
            key.clone(),
            Running {
                fingerprint,
                answer: rx,
            },
        );
        Entry::First(tx)
    }

    /// What the store says of `key`, and the answer that follows (see the module docs'
    /// table); a replay only when the record already holds an outcome.
    async fn decide<F, Fut>(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        caller: &str,
        handler: F,
    ) -> Guarded
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Answer>,
    {
        let begun = self
            .store
            .begin(key, fingerprint, &self.owner, caller, self.retention)
            .await;
        let answer = match begun {
            // Failing open would be the double execution the store is there to prevent.
            Err(e) => {
                metrics::counter!("zmesh_idempotency_store_errors_total").increment(1);
                Err(unknown(&format!(
                    "the idempotency store failed ({e}); not run"
                )))
            }
            Ok(Begin::Started) => {
                let answer = handler().await;
                // Recorded before the REPLY leaves: the other order leaves a window in which
                // the caller has the result and the store does not.
                if let Err(e) = self.store.complete(key, &to_outcome(&answer)).await {
                    metrics::counter!("zmesh_idempotency_store_errors_total").increment(1);
                    tracing::warn!(error = %e, key = %key, "outcome not recorded; a retry will be answered UnknownOutcome");
                }
                answer
            }
            Ok(Begin::Existing(r)) if r.fingerprint != *fingerprint => Err(other_arguments()),
            Ok(Begin::Existing(r)) => match r.state {
                RecordState::Done(outcome) => {
                    metrics::counter!("zmesh_idempotent_replayed_total").increment(1);
                    return Guarded {
                        answer: from_outcome(outcome),
                        replayed: true,
                    };
                }
                RecordState::InProgress => Err(unknown(&format!(
                    "a call with this key was started by {} (generation {:016x}) and its \
                     outcome was never recorded: it may have run; not run again",
                    r.owner.rid, r.owner.generation
                ))),
            },
        };
        Guarded::own(answer)
    }
}

fn unknown(message: &str) -> ServeError {
    ServeError::runtime(RemoteCode::UnknownOutcome, message)
}

fn lost() -> ServeError {
    unknown("the first call with this key ended without an answer: it may have run")
}

fn other_arguments() -> ServeError {
    ServeError::runtime(
        RemoteCode::InvalidParams,
        "this idempotency key was used for a call with other arguments; not run",
    )
}

/// The record of a handler's answer: the REPLY code byte and the result or error message.
fn to_outcome(answer: &Answer) -> Outcome {
    match answer {
        Ok(bytes) => Outcome {
            code: u8::from(ReplyCode::Ok),
            payload: bytes.clone(),
        },
        Err(e) => Outcome {
            code: u8::from(e.wire_code().to_reply()),
            payload: Bytes::from(e.message.clone().into_bytes()),
        },
    }
}

/// The answer a record gives: exactly what the first run answered.
fn from_outcome(outcome: Outcome) -> Answer {
    let code = ReplyCode::try_from(outcome.code)
        .ok()
        .map(RemoteCode::from_reply);
    match code {
        Some(None) => Ok(outcome.payload),
        Some(Some(code)) => Err(ServeError::runtime(
            code,
            String::from_utf8_lossy(&outcome.payload).into_owned(),
        )),
        None => Err(unknown(
            "the recorded outcome has an unknown code: it may have run",
        )),
    }
}
