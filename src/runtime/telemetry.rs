//! The metrics a node records through the [`metrics`] facade, with their kinds, label keys
//! and help texts: the list an exporter describes (`zmesh node --metrics ADDR` serves them for
//! Prometheus) and tests check the code against.
//!
//! Names follow the Prometheus conventions: every name starts with `zmesh_`, is snake_case,
//! a counter ends in `_total`, a gauge does not, and a name carries its unit when it has one
//! (`_seconds`). Labels carry a small fixed set of values, never an
//! identity (MISSION O2): no RID, endpoint, routing id or connection id; identities appear
//! only in count-limited snapshots and traces. The label keys are [`LABEL_KEYS`].

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only ever increases (Prometheus `counter`; the name ends in `_total`).
    Counter,
    /// A current value (Prometheus `gauge`).
    Gauge,
}

/// One metric of the runtime.
#[derive(Debug, Clone, Copy)]
pub struct MetricInfo {
    /// Its name, as recorded and as exported.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The label keys it may carry (each one of [`LABEL_KEYS`]).
    pub labels: &'static [&'static str],
    /// What it counts (the Prometheus `HELP` text).
    pub help: &'static str,
}

/// Every label key a metric may carry; each has a small fixed set of values: `reason` a
/// failure reason (`transport_error`, `deadline_exceeded`, ...), `code` a call error code,
/// `topology` one of the three topologies, `status` an operation status, `op` a discovery
/// store operation (`put`, `renew`, `watch`, `remove`).
pub const LABEL_KEYS: &[&str] = &["reason", "code", "topology", "status", "op"];

const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricInfo {
    MetricInfo {
        name,
        kind: MetricKind::Counter,
        labels,
        help,
    }
}

const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricInfo {
    MetricInfo {
        name,
        kind: MetricKind::Gauge,
        labels,
        help,
    }
}

/// Every metric the runtime records.
pub const METRICS: &[MetricInfo] = &[
    counter(
        "zmesh_app_records_sent_total",
        &[],
        "One-way application records (MESSAGE) handed to a socket.",
    ),
    counter(
        "zmesh_records_unsent_total",
        &["reason"],
        "One-way records still queued for a connection when it left ready (never sent), by the failure reason.",
    ),
    counter(
        "zmesh_app_records_received_total",
        &[],
        "One-way application records (MESSAGE) received on ready connections.",
    ),
    counter(
        "zmesh_fanout_records_received_total",
        &[],
        "Fanout records (PUBLISH) delivered to the application; beacons are not counted.",
    ),
    counter(
        "zmesh_fanout_join_beacons_total",
        &[],
        "Beacons sent at once because a subscriber joined (besides the 5 s grid).",
    ),
    counter(
        "zmesh_input_refused_total",
        &["reason"],
        "Input refused before admission, by reason: connections (malformed input, a failed transport handshake, the unadmitted cap, a security failure) and messages to the publisher that are not subscriptions.",
    ),
    counter(
        "zmesh_link_failures_total",
        &["reason"],
        "Links (connections or fanout subscriptions) that left ready or failed to become ready, by failure reason.",
    ),
    counter(
        "zmesh_stale_records_total",
        &[],
        "Records from connections no longer current, ignored.",
    ),
    counter(
        "zmesh_disconnect_sweep_records_total",
        &[],
        "Records that change nothing sent to every connection of a bound socket to find one \
         whose disconnect notice libzmq dropped (the fallback of disconnect detection).",
    ),
    counter(
        "zmesh_calls_started_total",
        &[],
        "Calls this node made whose REQUEST was handed to a socket.",
    ),
    counter(
        "zmesh_calls_failed_total",
        &["code"],
        "Calls this node made that ended in an error, by error code.",
    ),
    counter(
        "zmesh_batches_sent_total",
        &[],
        "BATCH records sent (several calls in one message).",
    ),
    counter(
        "zmesh_batches_received_total",
        &[],
        "BATCH records received.",
    ),
    counter(
        "zmesh_call_answers_ignored_total",
        &[],
        "ACCEPT, ITEM or REPLY records that matched no call in progress on their connection.",
    ),
    counter(
        "zmesh_calls_refused_total",
        &["code"],
        "Calls this node refused without running them, by reply code (Busy, Superseded).",
    ),
    counter(
        "zmesh_stream_items_unsent_total",
        &[],
        "Stream items of served calls that could not be sent.",
    ),
    counter(
        "zmesh_handlers_signalled_total",
        &["reason"],
        "Running handlers told that their caller no longer waits, by reason: caller_gone (its \
         connection left ready), cancel (a CANCEL), ttl (its ttl passed while it ran), \
         answered (the node answered it itself, or stops).",
    ),
    counter(
        "zmesh_handlers_stopped_total",
        &["reason"],
        "Running handlers (queries, by default) whose task was stopped because their caller \
         no longer waits, by reason.",
    ),
    counter(
        "zmesh_calls_cancelled_total",
        &[],
        "Calls this node made that its application cancelled (a dropped future or stream, or \
         cancel()) before they ended.",
    ),
    counter(
        "zmesh_stream_overruns_total",
        &[],
        "Streams this node called that ended as StreamOverrun: the application did not take \
         their items and the buffer was full.",
    ),
    counter(
        "zmesh_cancels_sent_total",
        &[],
        "CANCEL records sent to callees that negotiated them (WIRE.md §4.13).",
    ),
    counter(
        "zmesh_served_calls_cancelled_total",
        &[],
        "Calls this node served that a CANCEL forgot while they waited in a queue (they never \
         run); running ones count in zmesh_handlers_signalled_total{reason=\"cancel\"}.",
    ),
    counter(
        "zmesh_cancels_ignored_total",
        &[],
        "CANCEL records for a call this node does not hold (finished, or never seen).",
    ),
    counter(
        "zmesh_inline_overruns_total",
        &[],
        "Inline handler runs that held the I/O thread longer than their 1 ms budget.",
    ),
    counter(
        "zmesh_idempotent_attached_total",
        &[],
        "Non-repeatable calls attached to a run of the same idempotency key still in progress.",
    ),
    counter(
        "zmesh_idempotent_replayed_total",
        &[],
        "Non-repeatable calls answered from the idempotency store's record.",
    ),
    counter(
        "zmesh_idempotency_store_errors_total",
        &[],
        "Idempotency store operations that failed.",
    ),
    counter(
        "zmesh_discovery_lease_lost_total",
        &[],
        "Discovery leases of this node's descriptor that were lost.",
    ),
    counter(
        "zmesh_discovery_store_errors_total",
        &["op"],
        "Discovery store operations that failed, by operation.",
    ),
    gauge(
        "zmesh_discovery_descriptors",
        &[],
        "Descriptors the discovery watch sees in the store.",
    ),
    gauge(
        "zmesh_discovery_lease_age_seconds",
        &[],
        "Age of this node's discovery lease in seconds (-1 without a lease).",
    ),
    gauge(
        "zmesh_discovery_store_reachable",
        &[],
        "1 if the discovery store answered its last lease and watch operations, else 0.",
    ),
    gauge(
        "zmesh_calls_pending",
        &[],
        "Calls this node made that have not ended yet.",
    ),
    gauge(
        "zmesh_operations",
        &["status"],
        "Entries of the operations registry, by status.",
    ),
    gauge(
        "zmesh_allow_list_keys",
        &[],
        "CURVE: public keys on the allow-list of the bound endpoints (0 in none mode).",
    ),
];

/// Describes every metric of [`METRICS`] to the installed recorder (its kind and help text),
/// so an exporter can print `HELP` lines. Call it after installing a recorder.
pub fn describe() {
    for m in METRICS {
        match m.kind {
            MetricKind::Counter => metrics::describe_counter!(m.name, m.help),
            MetricKind::Gauge => metrics::describe_gauge!(m.name, m.help),
        }
    }
}
