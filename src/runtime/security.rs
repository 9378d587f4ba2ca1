//! Who is calling, and may they (issue 11, MISSION K6): the per-call authorizer of a served
//! channel.
//!
//! A [`crate::runtime::service::Service`] may carry an authorizer
//! ([`crate::runtime::service::Service::authorize`]). The I/O thread asks it about every
//! call of that channel (each call of a BATCH on its own) after the method was found and the
//! caller's semantics pin checked, and before the call is ACCEPTed: a refusal is answered
//! `Unauthorized` or `Forbidden` at once, and the call did not run (no ACCEPT, no handler,
//! no queue place, no idempotency record).
//!
//! What the authorizer sees of the caller is [`Caller`]: its RID and its security identity.
//! The identity is **verified** only when the connection authenticated the caller (CURVE: the
//! client's public key, checked by the transport). In `security = "none"` mode it is the
//! identity the caller *claimed* in its HELLO, and [`Caller::verified`] is false: anyone who
//! reaches the endpoint can claim anything, so an authorizer that needs to know who calls
//! answers such a caller [`Denied::Unauthorized`].

use std::sync::Arc;

use crate::proto::contract::Semantics;

/// The caller of one call, as the connection it arrived on knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The caller's RID (from its HELLO; never verified on its own).
    pub rid: String,
    /// The caller's security identity: under CURVE the Z85 text of its public key (verified
    /// by the transport); otherwise the identity its HELLO claimed.
    pub security_identity: String,
    /// True when the transport authenticated `security_identity` (CURVE); false when it is
    /// only a claim (`security = "none"`).
    pub verified: bool,
}

/// What an authorizer is asked about one call.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    /// Who calls.
    pub caller: &'a Caller,
    /// The channel called.
    pub channel: &'a str,
    /// The method called (`$describe` for the built-in contract method).
    pub method: &'a str,
    /// The method's declared semantics here (`None`: undeclared).
    pub semantics: Option<Semantics>,
}

/// An authorizer's refusal. Either way the call did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The channel needs to know who calls and the caller is not authenticated (answered
    /// `Unauthorized`).
    Unauthorized(String),
    /// The caller is known and not permitted to make this call (answered `Forbidden`).
    Forbidden(String),
}

impl Denied {
    /// An `Unauthorized` refusal with this message.
    pub fn unauthorized(message: impl Into<String>) -> Denied {
        Denied::Unauthorized(message.into())
    }

    /// A `Forbidden` refusal with this message.
    pub fn forbidden(message: impl Into<String>) -> Denied {
        Denied::Forbidden(message.into())
    }
}

/// A channel's authorizer: called on the node's I/O thread for every call of the channel, so
/// it must be cheap and must not block (look the identity up in a set, say). A panic refuses
/// the call `Forbidden`.
pub type Authorizer = Arc<dyn Fn(&AuthRequest<'_>) -> Result<(), Denied> + Send + Sync>;
