//! The service contract (MISSION K1): what repeating each method does to the world, how its
//! calls are executed, and the check that tells a compatible change from a breaking one.
//!
//! Like the rest of [`crate::proto`] this is sans-IO: plain data and pure functions. The
//! runtime builds a [`ServiceContract`] from a service's declaration, [`validate`]s it when the
//! service is exposed, reports the node's [`NodeContract`] from `$describe`, and refuses a
//! request whose pinned semantics [`pin_allows`] rejects. `zmesh contract check OLD NEW` runs
//! [`check`] over two described contracts.
//!
//! # Semantics and the danger order
//!
//! | semantics | repeating it | danger |
//! |---|---|---|
//! | `query` | costs a round trip | 0 |
//! | `idempotent-command` | leaves the same state as doing it once | 1 |
//! | `non-repeatable-command` | does it again | 2 |
//! | `undeclared` | nothing may be assumed | 3 |
//!
//! Undeclared is `Option<Semantics>::None` in the API and the string `"undeclared"` in JSON.
//! It stays undeclared: nothing here guesses that an unmarked method is safe to repeat, which
//! is why it is the most dangerous of the four. [`danger`] gives the rank. The wire byte
//! ([`wire::Semantics`]) has a different order (`Undeclared = 0`, so that callers built before
//! semantics existed send it); never compare wire bytes, compare [`danger`].
//!
//! # The pin
//!
//! A REQUEST's semantics byte is the semantics the caller was built against. [`pin_allows`] is
//! true when the method is not more dangerous to repeat than that: a caller that believes it is
//! calling a query must not be served by a method that now does something again. When it is
//! false, the runtime answers `IncompatibleVersion` and does not run the method. A pin of
//! `Undeclared` (byte 0) allows everything, so old callers are never refused.
//!
//! # Execution
//!
//! A service declares `serial`, `keyed` or `parallel` execution, or nothing; when nothing is
//! declared the default is graded by the semantics ([`default_execution`]): declared commands
//! run serially, queries and undeclared methods in parallel (guessing that an unmarked method is
//! safe to serialise would be the same mistake as guessing that it is safe to repeat).
//!
//! # The contract as data
//!
//! ```json
//! {
//!   "format": 1,
//!   "rid": "pump-1",
//!   "services": [
//!     {
//!       "channel": "pump",
//!       "version": "1",
//!       "execution": "default",
//!       "mailbox": 100,
//!       "methods": [
//!         {
//!           "name": "set_setpoint",
//!           "semantics": "idempotent-command",
//!           "shape": "unary",
//!           "execution": "serial",
//!           "conflate": true
//!         }
//!       ]
//!     }
//!   ]
//! }
//! ```
//!
//! A running node's describe adds `"guarded": true` or `false` to each non-repeatable command
//! ([`MethodContract::guarded`]): whether a durable idempotency store keeps a retry with the
//! same key from running it again.
//!
//! [`NodeContract::normalize`] sorts services by channel and methods by name, so two describes
//! of the same node are byte-identical JSON. Unknown fields are rejected when reading: a field
//! the check does not know is a difference the check could not judge.
//!
//! # The check
//!
//! [`check`] compares two contracts per (channel, method); it ignores the node's RID (a new
//! build of a node is usually compared against an old one of another RID). Every row:
//!
//! | kind | breaking | why |
//! |---|---|---|
//! | `service-removed` | yes | every call to the channel now finds no server |
//! | `service-added` | no | no caller depends on it yet |
//! | `method-removed` | yes | callers get `MethodNotFound` |
//! | `method-added` | no | no caller depends on it yet |
//! | `more-dangerous` | yes | a caller built against the old semantics may repeat the call (a retry after `UnknownOutcome`) and now repeats something that does more: query → idempotent-command, idempotent-command → non-repeatable-command, any declared → undeclared. Every type still lines up, which is exactly why nothing else would catch it |
//! | `less-dangerous` | no | callers are more careful than they now need to be; undeclared → declared is here |
//! | `shape-changed` | yes | unary ↔ stream: the caller's reading of the answer (one REPLY, or ITEMs then a REPLY) breaks |
//! | `execution-changed` | no | reported: ordering between callers changes (serial, keyed, parallel), but each call's request, answer and effect of repeating do not; a queue adds only `Busy` and queue-wait `Timeout` refusals, which certainly did not run |
//! | `conflate-changed`, turned on | yes | a queued call replaced by a newer one is answered `Superseded` and does not run: callers built against the old contract never saw that code |
//! | `conflate-changed`, turned off | no | every queued call now runs; for an idempotent command the final state is the same, and `Superseded` simply stops appearing |
//! | `mailbox-changed` | no | the bound of waiting calls is availability (more or fewer `Busy`), not correctness |
//! | `version-changed` | no | informational: the service's own free-text label; the check judges the methods, not the label |
//!
//! A contract with another [`CONTRACT_FORMAT`] is refused when it is read
//! ([`NodeContract::from_json`]), not reported as a change.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::proto::calls::CallShape;
use crate::proto::wire;

/// The format number of [`NodeContract`] JSON written and read by this version.
pub const CONTRACT_FORMAT: u32 = 1;

/// The mailbox bound when a service declares none: at most this many calls wait in one queue
/// (the executor's [`crate::proto::calls::DEFAULT_MAILBOX`], MISSION K4).
pub const DEFAULT_MAILBOX: usize = crate::proto::calls::DEFAULT_MAILBOX;

/// The contract version of a service that declares none.
pub const DEFAULT_VERSION: &str = "1";

/// The longest channel or method name, in bytes (the wire's `Name`).
pub const NAME_MAX: usize = 255;

/// What repeating a method does to the world, when the method declares it (MISSION K1).
///
/// A method that declares nothing is `None` wherever an `Option<Semantics>` appears; see the
/// [module documentation](self) for the danger order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Semantics {
    /// Reads only: repeating it costs a round trip.
    Query,
    /// Repeating it leaves the same state as doing it once (a setpoint, a close).
    IdempotentCommand,
    /// Repeating it does it again (a dispense, a batch advance).
    NonRepeatableCommand,
}

impl Semantics {
    /// The three declared semantics, least dangerous first.
    pub const ALL: [Semantics; 3] = [
        Semantics::Query,
        Semantics::IdempotentCommand,
        Semantics::NonRepeatableCommand,
    ];

    /// The contract name: `query`, `idempotent-command` or `non-repeatable-command`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Semantics::Query => "query",
            Semantics::IdempotentCommand => "idempotent-command",
            Semantics::NonRepeatableCommand => "non-repeatable-command",
        }
    }
}

impl fmt::Display for Semantics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The contract name of a method's semantics, `undeclared` for `None`.
pub const fn semantics_name(semantics: Option<Semantics>) -> &'static str {
    match semantics {
        Some(s) => s.as_str(),
        None => "undeclared",
    }
}

/// Reads a contract name back (the inverse of [`semantics_name`]); `None` for an unknown name.
pub fn parse_semantics(name: &str) -> Option<Option<Semantics>> {
    match name {
        "undeclared" => Some(None),
        _ => Semantics::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .map(Some),
    }
}

/// Serde for an `Option<Semantics>` field as one of the four contract names, with
/// `"undeclared"` for `None`: `#[serde(with = "zmesh::proto::contract::semantics_serde")]`.
pub mod semantics_serde {
    use serde::{de, Deserialize, Deserializer, Serializer};

    use super::{parse_semantics, semantics_name, Semantics};

    /// Writes the contract name.
    pub fn serialize<S: Serializer>(
        semantics: &Option<Semantics>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(semantics_name(*semantics))
    }

    /// Reads a contract name; any other string is an error naming the four.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Semantics>, D::Error> {
        let name = String::deserialize(deserializer)?;
        parse_semantics(&name).ok_or_else(|| {
            de::Error::invalid_value(
                de::Unexpected::Str(&name),
                &"query, idempotent-command, non-repeatable-command or undeclared",
            )
        })
    }
}

/// The wire byte for a method's semantics (`Undeclared` for `None`).
pub const fn to_wire(semantics: Option<Semantics>) -> wire::Semantics {
    match semantics {
        None => wire::Semantics::Undeclared,
        Some(Semantics::Query) => wire::Semantics::Query,
        Some(Semantics::IdempotentCommand) => wire::Semantics::IdempotentCommand,
        Some(Semantics::NonRepeatableCommand) => wire::Semantics::NonRepeatableCommand,
    }
}

/// A method's semantics from its wire byte (`None` for `Undeclared`).
pub const fn from_wire(semantics: wire::Semantics) -> Option<Semantics> {
    match semantics {
        wire::Semantics::Undeclared => None,
        wire::Semantics::Query => Some(Semantics::Query),
        wire::Semantics::IdempotentCommand => Some(Semantics::IdempotentCommand),
        wire::Semantics::NonRepeatableCommand => Some(Semantics::NonRepeatableCommand),
    }
}

/// How dangerous it is to repeat a method, 0 to 3: query 0, idempotent-command 1,
/// non-repeatable-command 2, undeclared 3 (nothing may be assumed, so it ranks above every
/// declared semantics). Distinct semantics have distinct ranks.
pub const fn danger(semantics: Option<Semantics>) -> u8 {
    match semantics {
        Some(Semantics::Query) => 0,
        Some(Semantics::IdempotentCommand) => 1,
        Some(Semantics::NonRepeatableCommand) => 2,
        None => 3,
    }
}

/// Whether a method with semantics `actual` may serve a request pinned to `pinned` (the
/// REQUEST's semantics byte, what the caller was built against): true when `actual` is not
/// more dangerous to repeat than the pin. A pin of `Undeclared` allows everything, so callers
/// that send 0 are never refused. When false the runtime answers `IncompatibleVersion` and
/// does not run the method.
pub const fn pin_allows(pinned: wire::Semantics, actual: Option<Semantics>) -> bool {
    danger(actual) <= danger(from_wire(pinned))
}

/// Whether the runtime stops the running handler of a call whose caller stopped waiting
/// (cancelled, gone, or past its ttl), at the handler's next `.await` (MISSION X1). By
/// default only a query: it changes nothing, so nothing is lost. A command may be half way
/// through changing the world, and an undeclared method may be one (undeclared is never
/// guessed to be safe, here as for retries), so those are only signalled. `choice`, the
/// method's own setting, wins where the service knows better.
pub fn stops_on_cancel(semantics: Option<Semantics>, choice: Option<bool>) -> bool {
    choice.unwrap_or(semantics == Some(Semantics::Query))
}

/// How a service's calls are executed relative to each other (MISSION K4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionKind {
    /// Calls run as they arrive, side by side.
    Parallel,
    /// One call at a time per instance; the others wait in the mailbox.
    Serial,
    /// One call at a time per key computed from the call (one device of a fleet, say).
    Keyed,
}

impl ExecutionKind {
    /// The contract name: `parallel`, `serial` or `keyed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ExecutionKind::Parallel => "parallel",
            ExecutionKind::Serial => "serial",
            ExecutionKind::Keyed => "keyed",
        }
    }
}

impl fmt::Display for ExecutionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The execution of a method when its service declares none, graded by its semantics:
/// serial for declared commands (command state is exactly what interleaving corrupts),
/// parallel for queries and undeclared methods.
pub const fn default_execution(semantics: Option<Semantics>) -> ExecutionKind {
    match semantics {
        Some(Semantics::IdempotentCommand | Semantics::NonRepeatableCommand) => {
            ExecutionKind::Serial
        }
        Some(Semantics::Query) | None => ExecutionKind::Parallel,
    }
}

/// The execution a method actually gets: the service's declared execution, or
/// [`default_execution`] when it declares none.
pub const fn effective_execution(
    declared: Option<ExecutionKind>,
    semantics: Option<Semantics>,
) -> ExecutionKind {
    match declared {
        Some(kind) => kind,
        None => default_execution(semantics),
    }
}

/// Serde for a service's declared execution, with `"default"` for `None`.
mod service_execution_serde {
    use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

    use super::ExecutionKind;

    pub fn serialize<S: Serializer>(
        execution: &Option<ExecutionKind>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match execution {
            Some(kind) => kind.serialize(serializer),
            None => serializer.serialize_str("default"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<ExecutionKind>, D::Error> {
        let name = String::deserialize(deserializer)?;
        match name.as_str() {
            "default" => Ok(None),
            "parallel" => Ok(Some(ExecutionKind::Parallel)),
            "serial" => Ok(Some(ExecutionKind::Serial)),
            "keyed" => Ok(Some(ExecutionKind::Keyed)),
            _ => Err(de::Error::invalid_value(
                de::Unexpected::Str(&name),
                &"default, parallel, serial or keyed",
            )),
        }
    }
}

/// Whether a method answers once or streams items first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// One REPLY.
    Unary,
    /// ITEMs, then one REPLY.
    Stream,
}

impl Shape {
    /// The contract name: `unary` or `stream`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Shape::Unary => "unary",
            Shape::Stream => "stream",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CallShape> for Shape {
    fn from(shape: CallShape) -> Self {
        match shape {
            CallShape::Unary => Shape::Unary,
            CallShape::Stream => Shape::Stream,
        }
    }
}

impl From<Shape> for CallShape {
    fn from(shape: Shape) -> Self {
        match shape {
            Shape::Unary => CallShape::Unary,
            Shape::Stream => CallShape::Stream,
        }
    }
}

fn default_version() -> String {
    DEFAULT_VERSION.to_owned()
}

/// One method of a service, as `$describe` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodContract {
    /// The method name: 1 to 255 bytes, unique in its service, not starting with `$`.
    pub name: String,
    /// What repeating it does; `None` (JSON `"undeclared"`) when the method declares nothing.
    #[serde(with = "semantics_serde")]
    pub semantics: Option<Semantics>,
    /// Whether it answers once or streams.
    pub shape: Shape,
    /// The execution it actually gets ([`effective_execution`]), not what was declared.
    pub execution: ExecutionKind,
    /// Whether a newer queued call to it replaces a waiting one, which is answered
    /// `Superseded`. Only for unary idempotent commands that queue. JSON default `false`.
    #[serde(default)]
    pub conflate: bool,
    /// For a non-repeatable command on a running node: whether its calls run behind a durable
    /// idempotency store (MISSION K3), so that a retry with the same idempotency key, or a
    /// redelivery after a crash, is answered from the record instead of running it again.
    /// `Some(false)`: keys are ignored and a retry runs it again. `None` (JSON: absent) for
    /// every other method and in a service's own declaration ([`crate::runtime::service::Service::contract`]):
    /// it is a property of the node that serves it, set by `describe`. [`check`] does not
    /// compare it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarded: Option<bool>,
}

/// One exposed service (channel) of a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceContract {
    /// The channel it is exposed on: 1 to 255 bytes, unique in the node.
    pub channel: String,
    /// The service's own contract version: free text for people, never compared by order.
    /// JSON default [`DEFAULT_VERSION`].
    #[serde(default = "default_version")]
    pub version: String,
    /// The declared execution; `None` (JSON `"default"`) when the service declares none and
    /// each method's execution is graded by its semantics ([`default_execution`]).
    #[serde(with = "service_execution_serde")]
    pub execution: Option<ExecutionKind>,
    /// How many calls may wait in one queue before an arrival is refused `Busy` (at least 1).
    pub mailbox: usize,
    /// The methods, sorted by name once [normalized](Self::normalize).
    pub methods: Vec<MethodContract>,
}

impl ServiceContract {
    /// A service on `channel` with version [`DEFAULT_VERSION`], no declared execution,
    /// mailbox [`DEFAULT_MAILBOX`] and no methods.
    pub fn new(channel: impl Into<String>) -> Self {
        Self {
            channel: channel.into(),
            version: default_version(),
            execution: None,
            mailbox: DEFAULT_MAILBOX,
            methods: Vec::new(),
        }
    }

    /// Sorts the methods by name.
    pub fn normalize(&mut self) {
        self.methods.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// The method called `name`, if any.
    pub fn method(&self, name: &str) -> Option<&MethodContract> {
        self.methods.iter().find(|m| m.name == name)
    }
}

/// Everything a node exposes, as `$describe` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeContract {
    /// The format of this document; [`CONTRACT_FORMAT`] for what this version writes.
    pub format: u32,
    /// The node's RID (informational; [`check`] ignores it).
    pub rid: String,
    /// The services, sorted by channel once [normalized](Self::normalize).
    pub services: Vec<ServiceContract>,
}

impl NodeContract {
    /// An empty contract of the current format for the node `rid`.
    pub fn new(rid: impl Into<String>) -> Self {
        Self {
            format: CONTRACT_FORMAT,
            rid: rid.into(),
            services: Vec::new(),
        }
    }

    /// Sorts services by channel and each service's methods by name, so that two describes of
    /// the same node are byte-identical.
    pub fn normalize(&mut self) {
        self.services.sort_by(|a, b| a.channel.cmp(&b.channel));
        for service in &mut self.services {
            service.normalize();
        }
    }

    /// [`validate`]s every service and checks that no channel appears twice.
    pub fn validate(&self) -> Result<(), ContractError> {
        let mut seen = HashSet::new();
        for service in &self.services {
            validate(service)?;
            if !seen.insert(service.channel.as_str()) {
                return Err(ContractError::DuplicateChannel {
                    channel: service.channel.clone(),
                });
            }
        }
        Ok(())
    }

    /// Pretty JSON (two-space indent, fields in declaration order). Call
    /// [`normalize`](Self::normalize) first for a canonical document.
    pub fn to_json_pretty(&self) -> Result<String, ContractError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Reads a contract: well-formed JSON with exactly the known fields, of format
    /// [`CONTRACT_FORMAT`], whose services pass [`validate`](Self::validate). The order of
    /// services and methods is kept as written.
    pub fn from_json(json: &str) -> Result<Self, ContractError> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        // The format is read first, so a document of another format is reported as that and
        // not as whatever field it happens to lack.
        let Format { format } = serde_json::from_str(json)?;
        if format != CONTRACT_FORMAT {
            return Err(ContractError::UnsupportedFormat { found: format });
        }
        let contract: NodeContract = serde_json::from_str(json)?;
        contract.validate()?;
        Ok(contract)
    }
}

/// Why a contract is refused: when a service is exposed ([`validate`]) or a document is read
/// ([`NodeContract::from_json`]). Each message says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The channel name is empty.
    #[error(
        "a service has an empty channel name: give it a channel name of 1 to {NAME_MAX} bytes"
    )]
    EmptyChannel,
    /// The channel name is longer than the wire allows.
    #[error("channel name {channel:?} is {len} bytes, more than the {NAME_MAX} the wire carries: shorten it")]
    ChannelTooLong {
        /// The channel.
        channel: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A method name is empty.
    #[error("a method of channel {channel:?} has an empty name: give it a name of 1 to {NAME_MAX} bytes")]
    EmptyMethodName {
        /// The channel.
        channel: String,
    },
    /// A method name is longer than the wire allows.
    #[error("method name {method:?} of channel {channel:?} is {len} bytes, more than the {NAME_MAX} the wire carries: shorten it")]
    MethodNameTooLong {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A method name starts with `$`, which is reserved for built-in methods.
    #[error("method {method:?} of channel {channel:?} starts with `$`, which is reserved for built-in methods such as `$describe`: rename it")]
    ReservedMethodName {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
    },
    /// Two methods of one service have the same name.
    #[error("channel {channel:?} exposes method {method:?} twice: method names must be unique within a service")]
    DuplicateMethod {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
    },
    /// Two services of one node have the same channel.
    #[error("channel {channel:?} is exposed twice: channel names must be unique within a node")]
    DuplicateChannel {
        /// The channel.
        channel: String,
    },
    /// The mailbox bound is 0.
    #[error("channel {channel:?} has mailbox 0, which refuses every call that has to wait: use at least 1 (the default is {DEFAULT_MAILBOX})")]
    ZeroMailbox {
        /// The channel.
        channel: String,
    },
    /// A method that is not an idempotent command declares `conflate`.
    #[error("method {method:?} of channel {channel:?} declares conflate but is {}: {} Only an idempotent-command may conflate: declare it idempotent-command or drop conflate", semantics_name(*.semantics), conflate_refusal(*.semantics))]
    ConflateNotIdempotent {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
        /// Its semantics (anything but idempotent-command).
        semantics: Option<Semantics>,
    },
    /// A stream declares `conflate`.
    #[error("method {method:?} of channel {channel:?} is a stream and declares conflate: conflation keeps the newest of setpoint-shaped commands that answer once, and a stream is not one: make it unary or drop conflate")]
    ConflateStream {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
    },
    /// A method that runs in parallel declares `conflate`.
    #[error("method {method:?} of channel {channel:?} declares conflate but runs parallel: its calls never wait in a queue, so there is nothing to conflate: declare the service's execution serial or keyed, or drop conflate")]
    ConflateParallel {
        /// The channel.
        channel: String,
        /// The method.
        method: String,
    },
    /// The document is not JSON of a contract.
    #[error("not a zmesh contract: {0}")]
    Json(#[from] serde_json::Error),
    /// The document is of a format this version does not read.
    #[error("contract format {found} is not supported: this zmesh reads format {CONTRACT_FORMAT}")]
    UnsupportedFormat {
        /// The format the document declares.
        found: u32,
    },
}

/// Why a method of these semantics may not conflate (for [`ContractError::ConflateNotIdempotent`]).
fn conflate_refusal(semantics: Option<Semantics>) -> &'static str {
    match semantics {
        Some(Semantics::NonRepeatableCommand) => {
            "dropping a queued non-repeatable command would skip work a caller was promised."
        }
        Some(Semantics::Query) => {
            "a replaced query's caller would lose a reading it asked for, with no state to converge on."
        }
        None => {
            "nothing is declared about the method, so nothing may be assumed about dropping a call to it."
        }
        Some(Semantics::IdempotentCommand) => "",
    }
}

/// Checks a service's contract when it is exposed (MISSION K4: invalid combinations are
/// rejected then, not discovered at the first call). Returns the first problem found.
pub fn validate(service: &ServiceContract) -> Result<(), ContractError> {
    let channel = &service.channel;
    if channel.is_empty() {
        return Err(ContractError::EmptyChannel);
    }
    if channel.len() > NAME_MAX {
        return Err(ContractError::ChannelTooLong {
            channel: channel.clone(),
            len: channel.len(),
        });
    }
    if service.mailbox == 0 {
        return Err(ContractError::ZeroMailbox {
            channel: channel.clone(),
        });
    }
    let mut seen = HashSet::new();
    for m in &service.methods {
        let method = || m.name.clone();
        if m.name.is_empty() {
            return Err(ContractError::EmptyMethodName {
                channel: channel.clone(),
            });
        }
        if m.name.len() > NAME_MAX {
            return Err(ContractError::MethodNameTooLong {
                channel: channel.clone(),
                method: method(),
                len: m.name.len(),
            });
        }
        if m.name.starts_with('$') {
            return Err(ContractError::ReservedMethodName {
                channel: channel.clone(),
                method: method(),
            });
        }
        if !seen.insert(m.name.as_str()) {
            return Err(ContractError::DuplicateMethod {
                channel: channel.clone(),
                method: method(),
            });
        }
        if m.conflate {
            if m.semantics != Some(Semantics::IdempotentCommand) {
                return Err(ContractError::ConflateNotIdempotent {
                    channel: channel.clone(),
                    method: method(),
                    semantics: m.semantics,
                });
            }
            if m.shape == Shape::Stream {
                return Err(ContractError::ConflateStream {
                    channel: channel.clone(),
                    method: method(),
                });
            }
            if m.execution == ExecutionKind::Parallel {
                return Err(ContractError::ConflateParallel {
                    channel: channel.clone(),
                    method: method(),
                });
            }
        }
    }
    Ok(())
}

/// What [`check`] found between two contracts, ordered by channel, then service-level changes
/// before method changes, then method name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CheckReport {
    /// Every difference, breaking or not.
    pub changes: Vec<Change>,
}

impl CheckReport {
    /// Whether any change breaks a caller built against the old contract.
    pub fn is_breaking(&self) -> bool {
        self.changes.iter().any(|c| c.breaking)
    }

    /// The breaking changes only.
    pub fn breaking(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.breaking)
    }
}

/// One difference between two contracts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The channel it concerns.
    pub channel: String,
    /// The method it concerns; `None` for a change to the service as a whole.
    pub method: Option<String>,
    /// What changed (JSON: a `change` tag and the variant's fields, inline).
    #[serde(flatten)]
    pub kind: ChangeKind,
    /// Whether it breaks a caller built against the old contract ([`ChangeKind::is_breaking`]).
    pub breaking: bool,
    /// A sentence for people: what changed and what it does to a caller.
    pub detail: String,
}

/// What changed; the [module documentation](self) has the table with the reasons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ChangeKind {
    /// The channel is gone (breaking).
    ServiceRemoved,
    /// A new channel (not breaking).
    ServiceAdded,
    /// The method is gone (breaking).
    MethodRemoved,
    /// A new method (not breaking).
    MethodAdded,
    /// Repeating the method now does more than before (breaking).
    MoreDangerous {
        /// The old semantics.
        #[serde(with = "semantics_serde")]
        from: Option<Semantics>,
        /// The new semantics.
        #[serde(with = "semantics_serde")]
        to: Option<Semantics>,
    },
    /// Repeating the method now does less than before (not breaking).
    LessDangerous {
        /// The old semantics.
        #[serde(with = "semantics_serde")]
        from: Option<Semantics>,
        /// The new semantics.
        #[serde(with = "semantics_serde")]
        to: Option<Semantics>,
    },
    /// Unary became stream or the reverse (breaking).
    ShapeChanged {
        /// The old shape.
        from: Shape,
        /// The new shape.
        to: Shape,
    },
    /// The method's effective execution changed (not breaking).
    ExecutionChanged {
        /// The old effective execution.
        from: ExecutionKind,
        /// The new effective execution.
        to: ExecutionKind,
    },
    /// The method started (breaking) or stopped (not breaking) conflating.
    ConflateChanged {
        /// The old setting.
        from: bool,
        /// The new setting.
        to: bool,
    },
    /// The service's mailbox bound changed (not breaking).
    MailboxChanged {
        /// The old bound.
        from: usize,
        /// The new bound.
        to: usize,
    },
    /// The service's own version label changed (informational, not breaking).
    VersionChanged {
        /// The old version.
        from: String,
        /// The new version.
        to: String,
    },
}

impl ChangeKind {
    /// Whether this change breaks a caller built against the old contract.
    pub fn is_breaking(&self) -> bool {
        match self {
            ChangeKind::ServiceRemoved
            | ChangeKind::MethodRemoved
            | ChangeKind::MoreDangerous { .. }
            | ChangeKind::ShapeChanged { .. } => true,
            ChangeKind::ConflateChanged { to, .. } => *to,
            ChangeKind::ServiceAdded
            | ChangeKind::MethodAdded
            | ChangeKind::LessDangerous { .. }
            | ChangeKind::ExecutionChanged { .. }
            | ChangeKind::MailboxChanged { .. }
            | ChangeKind::VersionChanged { .. } => false,
        }
    }

    /// The kind's name, as in the JSON `change` tag (`more-dangerous`, ...).
    pub const fn as_str(&self) -> &'static str {
        match self {
            ChangeKind::ServiceRemoved => "service-removed",
            ChangeKind::ServiceAdded => "service-added",
            ChangeKind::MethodRemoved => "method-removed",
            ChangeKind::MethodAdded => "method-added",
            ChangeKind::MoreDangerous { .. } => "more-dangerous",
            ChangeKind::LessDangerous { .. } => "less-dangerous",
            ChangeKind::ShapeChanged { .. } => "shape-changed",
            ChangeKind::ExecutionChanged { .. } => "execution-changed",
            ChangeKind::ConflateChanged { .. } => "conflate-changed",
            ChangeKind::MailboxChanged { .. } => "mailbox-changed",
            ChangeKind::VersionChanged { .. } => "version-changed",
        }
    }
}

/// What repeating a method of these semantics does, for change details.
fn repeat_effect(semantics: Option<Semantics>) -> &'static str {
    match semantics {
        Some(Semantics::Query) => "costs a round trip",
        Some(Semantics::IdempotentCommand) => "leaves the same state as doing it once",
        Some(Semantics::NonRepeatableCommand) => "does it again",
        None => "may do anything",
    }
}

/// Compares the contract a caller was built against (`old`) with the one now served (`new`),
/// per (channel, method); the RID is ignored. Both are expected to be valid
/// ([`NodeContract::validate`]); of a channel or method listed twice, the last one counts.
pub fn check(old: &NodeContract, new: &NodeContract) -> CheckReport {
    let old_services = by_channel(old);
    let new_services = by_channel(new);
    let channels: BTreeSet<&str> = old_services
        .keys()
        .chain(new_services.keys())
        .copied()
        .collect();
    let mut changes = Vec::new();
    for channel in channels {
        match (old_services.get(channel), new_services.get(channel)) {
            (Some(o), None) => changes.push(change(
                channel,
                None,
                ChangeKind::ServiceRemoved,
                format!(
                    "the service and its {} method(s) are gone: every call to the channel finds no server",
                    o.methods.len()
                ),
            )),
            (None, Some(n)) => changes.push(change(
                channel,
                None,
                ChangeKind::ServiceAdded,
                format!("a new service with {} method(s)", n.methods.len()),
            )),
            (Some(o), Some(n)) => check_service(o, n, &mut changes),
            (None, None) => {}
        }
    }
    CheckReport { changes }
}

fn by_channel(contract: &NodeContract) -> BTreeMap<&str, &ServiceContract> {
    contract
        .services
        .iter()
        .map(|s| (s.channel.as_str(), s))
        .collect()
}

fn by_name(service: &ServiceContract) -> BTreeMap<&str, &MethodContract> {
    service
        .methods
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect()
}

fn change(channel: &str, method: Option<&str>, kind: ChangeKind, detail: String) -> Change {
    Change {
        channel: channel.to_owned(),
        method: method.map(str::to_owned),
        breaking: kind.is_breaking(),
        kind,
        detail,
    }
}

fn check_service(old: &ServiceContract, new: &ServiceContract, changes: &mut Vec<Change>) {
    let channel = old.channel.as_str();
    if old.version != new.version {
        changes.push(change(
            channel,
            None,
            ChangeKind::VersionChanged {
                from: old.version.clone(),
                to: new.version.clone(),
            },
            format!(
                "version {:?} -> {:?} (a label; the methods are judged on their own)",
                old.version, new.version
            ),
        ));
    }
    if old.mailbox != new.mailbox {
        changes.push(change(
            channel,
            None,
            ChangeKind::MailboxChanged {
                from: old.mailbox,
                to: new.mailbox,
            },
            format!(
                "mailbox {} -> {}: at most that many calls wait in a queue, later ones are refused Busy",
                old.mailbox, new.mailbox
            ),
        ));
    }
    let old_methods = by_name(old);
    let new_methods = by_name(new);
    let names: BTreeSet<&str> = old_methods
        .keys()
        .chain(new_methods.keys())
        .copied()
        .collect();
    for name in names {
        match (old_methods.get(name), new_methods.get(name)) {
            (Some(_), None) => changes.push(change(
                channel,
                Some(name),
                ChangeKind::MethodRemoved,
                "the method is gone: callers get MethodNotFound".to_owned(),
            )),
            (None, Some(n)) => changes.push(change(
                channel,
                Some(name),
                ChangeKind::MethodAdded,
                format!(
                    "a new {} {} method, {} execution",
                    semantics_name(n.semantics),
                    n.shape,
                    n.execution
                ),
            )),
            (Some(o), Some(n)) => check_method(channel, o, n, changes),
            (None, None) => {}
        }
    }
}

fn check_method(channel: &str, old: &MethodContract, new: &MethodContract, out: &mut Vec<Change>) {
    let method = Some(old.name.as_str());
    let (from, to) = (old.semantics, new.semantics);
    if from != to {
        let (kind, consequence) = if danger(to) > danger(from) {
            (
                ChangeKind::MoreDangerous { from, to },
                format!(
                    "a caller built against {} may repeat it, and repeating it now {}",
                    semantics_name(from),
                    repeat_effect(to)
                ),
            )
        } else {
            (
                ChangeKind::LessDangerous { from, to },
                format!(
                    "repeating it now {}; callers are more careful than they need to be",
                    repeat_effect(to)
                ),
            )
        };
        out.push(change(
            channel,
            method,
            kind,
            format!(
                "{} -> {}: {consequence}",
                semantics_name(from),
                semantics_name(to)
            ),
        ));
    }
    if old.shape != new.shape {
        out.push(change(
            channel,
            method,
            ChangeKind::ShapeChanged {
                from: old.shape,
                to: new.shape,
            },
            format!(
                "{} -> {}: a caller built against the old contract reads the answer as {}",
                old.shape, new.shape, old.shape
            ),
        ));
    }
    if old.execution != new.execution {
        out.push(change(
            channel,
            method,
            ChangeKind::ExecutionChanged {
                from: old.execution,
                to: new.execution,
            },
            format!(
                "{} -> {}: ordering between callers changes, the effect of each call does not",
                old.execution, new.execution
            ),
        ));
    }
    if old.conflate != new.conflate {
        let detail = if new.conflate {
            "now conflates: a waiting call replaced by a newer one does not run and is answered Superseded, which callers built against the old contract never saw"
        } else {
            "no longer conflates: every queued call runs, and Superseded is no longer answered"
        };
        out.push(change(
            channel,
            method,
            ChangeKind::ConflateChanged {
                from: old.conflate,
                to: new.conflate,
            },
            detail.to_owned(),
        ));
    }
}

#[cfg(test)]
mod tests;
