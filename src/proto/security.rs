//! Security identities and the ZAP exchange, sans-IO (MISSION F1, F3).
//!
//! The types other modules share: a CURVE [`PublicKey`] (the verified security identity of a
//! peer once CURVE is on; descriptors carry it too), its Z85 text form (ZeroMQ RFC 32), the
//! reasons an unadmitted connection is refused ([`InputRefusal`], the label of
//! `zmesh_input_refused_total`), and the codec of ZAP requests and replies (ZeroMQ RFC 27),
//! which the I/O thread answers for its bound sockets. Nothing here reads a clock or touches a
//! socket.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Length of a CURVE key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of a CURVE key in Z85 text.
pub const KEY_Z85_LEN: usize = 40;

const Z85: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Z85 text of `bytes` (ZeroMQ RFC 32); `None` unless the length is a multiple of 4.
pub fn z85_encode(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = String::with_capacity(bytes.len() / 4 * 5);
    for chunk in bytes.chunks_exact(4) {
        let mut v = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = Z85[(v % 85) as usize];
            v /= 85;
        }
        out.extend(digits.iter().map(|&d| d as char));
    }
    Some(out)
}

/// Bytes of Z85 text; `None` unless the length is a multiple of 5 and every character and
/// group is valid.
pub fn z85_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(5) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 5 * 4);
    for chunk in text.chunks_exact(5) {
        let mut v: u64 = 0;
        for &c in chunk {
            let d = Z85.iter().position(|&z| z == c)?;
            v = v * 85 + d as u64;
        }
        let v = u32::try_from(v).ok()?;
        out.extend_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

/// A CURVE public key: the security identity a peer proves it holds under CURVE. Shown and
/// configured as its 40 characters of Z85 text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// The key of these 32 bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The key of a 32-byte slice; `None` for another length.
    pub fn from_slice(bytes: &[u8]) -> Option<PublicKey> {
        bytes.try_into().ok().map(PublicKey)
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key's 40 characters of Z85 text.
    pub fn to_z85(&self) -> String {
        // 32 bytes are a multiple of 4: always encodable.
        z85_encode(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_z85())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_z85())
    }
}

/// Text that is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a CURVE key: expected {KEY_Z85_LEN} characters of Z85 text")]
pub struct KeyParseError;

impl FromStr for PublicKey {
    type Err = KeyParseError;

    fn from_str(s: &str) -> Result<PublicKey, KeyParseError> {
        let s = s.trim();
        if s.len() != KEY_Z85_LEN {
            return Err(KeyParseError);
        }
        z85_decode(s)
            .and_then(|b| PublicKey::from_slice(&b))
            .ok_or(KeyParseError)
    }
}

impl Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_z85())
    }
}

impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PublicKey, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a connection that was never admitted (no WELCOME) was refused or dropped: the only
/// label of the metric `zmesh_input_refused_total` (MISSION O2: never an identity), and the
/// reason of an entry in a snapshot's recent refusals.
///
/// A frame longer than `max_frame_size` has no reason here: libzmq closes its connection as
/// it reads the frame's length (no byte of it is stored) and reports that only as a
/// disconnect, so zmesh cannot tell it from a peer that went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputRefusal {
    /// Its first record did not decode (WIRE.md §6): garbage, answered REJECT Protocol or
    /// UnsupportedVersion.
    Malformed,
    /// Its first record was well-formed but not a HELLO: answered REJECT Protocol.
    UnexpectedRecord,
    /// The transport handshake failed: bytes that are not ZMTP, a mechanism mismatch, or
    /// libzmq's handshake deadline passed (ZMTP `HANDSHAKE_FAILED_*` events).
    HandshakeFailed,
    /// The endpoint already had as many unadmitted connections as `max_unadmitted`: refused
    /// in the transport handshake (ZAP status 500).
    UnadmittedCap,
    /// Security verification failed (CURVE): a client whose key the allow-list does not name
    /// (ZAP status 400), a client without CURVE or one that does not hold the key it presents
    /// (its handshake fails), or a HELLO that claims another security identity than the
    /// connection's verified key (REJECT `SecurityFailure`).
    SecurityFailure,
}

impl InputRefusal {
    /// Stable snake_case name, as in the metric label and snapshots.
    pub fn as_str(&self) -> &'static str {
        match self {
            InputRefusal::Malformed => "malformed",
            InputRefusal::UnexpectedRecord => "unexpected_record",
            InputRefusal::HandshakeFailed => "handshake_failed",
            InputRefusal::UnadmittedCap => "unadmitted_cap",
            InputRefusal::SecurityFailure => "security_failure",
        }
    }
}

impl fmt::Display for InputRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// libzmq's code for a handshake that failed in the security mechanism's cryptography (the
/// value of a `HANDSHAKE_FAILED_PROTOCOL` event): under CURVE, a client that encrypted its
/// HELLO for another server key, or a box that does not open.
pub const ZMTP_CRYPTOGRAPHIC: u32 = 0x1100_0001;
/// libzmq's code for a handshake whose two greetings name different mechanisms (one side
/// CURVE, the other NULL).
pub const ZMTP_MECHANISM_MISMATCH: u32 = 0x1100_0002;
/// libzmq's code for a failed CURVE key exchange.
pub const ZMTP_KEY_EXCHANGE: u32 = 0x1000_0003;

/// What the value of a failed transport handshake event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The two sides use different security mechanisms (CURVE against none).
    MechanismMismatch,
    /// The CURVE handshake's cryptography failed: the keys do not match.
    Cryptographic,
    /// A ZMTP protocol error that says nothing about keys (garbage, an unknown command).
    Protocol,
    /// The connection failed during the handshake without a protocol error (a libzmq
    /// `HANDSHAKE_FAILED_NO_DETAIL` event, whose value is an errno): the other side closed it.
    Closed,
}

impl HandshakeFailure {
    /// Classifies the value of a libzmq `HANDSHAKE_FAILED_*` event (protocol error codes are
    /// `0x1000_0000` and above; anything below is an errno).
    pub fn of(code: u32) -> HandshakeFailure {
        match code {
            ZMTP_MECHANISM_MISMATCH => HandshakeFailure::MechanismMismatch,
            ZMTP_CRYPTOGRAPHIC | ZMTP_KEY_EXCHANGE => HandshakeFailure::Cryptographic,
            c if c >= 0x1000_0000 => HandshakeFailure::Protocol,
            _ => HandshakeFailure::Closed,
        }
    }
}

/// The security mechanism a ZAP request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// No security (the client's key is not known).
    Null,
    /// PLAIN (user name and password in clear; zmesh never accepts it).
    Plain,
    /// CURVE: the client proved it holds the secret key of the public key in the request.
    Curve,
    /// Anything else (GSSAPI ...).
    Other(String),
}

/// A ZAP request (RFC 27) as libzmq sends it, without the routing envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZapRequest {
    /// Echoed in the reply.
    pub request_id: Vec<u8>,
    /// The ZAP domain of the socket the connection arrived on (zmesh: one per bound socket).
    pub domain: String,
    /// The client's address (an IP address for tcp, empty for ipc).
    pub address: String,
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The mechanism's credentials: CURVE, one frame of the client's 32-byte public key.
    pub credentials: Vec<Vec<u8>>,
}

/// A ZAP message that is not a version 1.0 request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed ZAP request: {0}")]
pub struct ZapError(&'static str);

impl ZapRequest {
    /// Parses the frames after the routing envelope (the empty delimiter included or not).
    pub fn parse<F: AsRef<[u8]>>(frames: &[F]) -> Result<ZapRequest, ZapError> {
        let mut it = frames.iter().map(AsRef::as_ref).peekable();
        if it.peek().is_some_and(|f| f.is_empty()) {
            it.next();
        }
        let mut next = |what| it.next().ok_or(ZapError(what));
        if next("version")? != b"1.0" {
            return Err(ZapError("version is not 1.0"));
        }
        let request_id = next("request id")?.to_vec();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let domain = text(next("domain")?);
        let address = text(next("address")?);
        let _identity = next("identity")?;
        let mechanism = match next("mechanism")? {
            b"NULL" => Mechanism::Null,
            b"PLAIN" => Mechanism::Plain,
            b"CURVE" => Mechanism::Curve,
            other => Mechanism::Other(text(other)),
        };
        let credentials: Vec<Vec<u8>> = it.map(<[u8]>::to_vec).collect();
        if mechanism == Mechanism::Curve && credentials.len() != 1 {
            return Err(ZapError("CURVE request without exactly one key frame"));
        }
        Ok(ZapRequest {
            request_id,
            domain,
            address,
            mechanism,
            credentials,
        })
    }

    /// The client's public key, for a CURVE request.
    pub fn curve_key(&self) -> Option<PublicKey> {
        match self.mechanism {
            Mechanism::Curve => self
                .credentials
                .first()
                .and_then(|k| PublicKey::from_slice(k)),
            _ => None,
        }
    }
}

/// A ZAP verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZapStatus {
    /// 200: admitted to the transport.
    Ok,
    /// 400: authentication failed.
    AuthFailure,
    /// 500: refused for another reason (zmesh: the unadmitted-connection cap). Not 300
    /// ("temporary"): libzmq answers a 300 with nothing and leaves the connection open until
    /// its handshake deadline, holding it meanwhile; after a 400 or 500 it sends the client
    /// an ERROR and closes the connection at once.
    Refused,
}

impl ZapStatus {
    fn code(self) -> &'static [u8] {
        match self {
            ZapStatus::Ok => b"200",
            ZapStatus::AuthFailure => b"400",
            ZapStatus::Refused => b"500",
        }
    }
}

/// A ZAP reply (RFC 27), without the routing envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZapReply {
    /// The request's id.
    pub request_id: Vec<u8>,
    /// The verdict.
    pub status: ZapStatus,
    /// Text for humans (libzmq logs nothing of it).
    pub text: String,
    /// The User-Id libzmq attaches to every message of the connection (message property
    /// `User-Id`); zmesh: the Z85 public key of a CURVE client, else empty.
    pub user_id: String,
}

impl ZapReply {
    /// The reply's frames, starting with the empty delimiter libzmq's ZAP client expects.
    pub fn encode(&self) -> Vec<Vec<u8>> {
        vec![
            Vec::new(),
            b"1.0".to_vec(),
            self.request_id.clone(),
            self.status.code().to_vec(),
            self.text.as_bytes().to_vec(),
            self.user_id.as_bytes().to_vec(),
            Vec::new(),
        ]
    }
}

/// The refusal a failed transport handshake (a monitor event's `value`) counts as on a bound
/// socket (the publisher's included) of a node that runs CURVE (`curve`) or not.
pub fn handshake_refusal(curve: bool, value: u32) -> (InputRefusal, String) {
    match (curve, HandshakeFailure::of(value)) {
        (true, HandshakeFailure::MechanismMismatch) => (
            InputRefusal::SecurityFailure,
            "a client without CURVE on a CURVE endpoint (mechanism mismatch)".into(),
        ),
        (true, HandshakeFailure::Cryptographic) => (
            InputRefusal::SecurityFailure,
            format!(
                "the CURVE handshake failed: the client does not use this node's public key, \
                 or does not hold its own (libzmq code {value:#x})"
            ),
        ),
        _ => (
            InputRefusal::HandshakeFailed,
            format!(
                "transport handshake failed (not ZMTP, a mechanism mismatch, or no handshake \
                 within 15 s; libzmq code {value:#x})"
            ),
        ),
    }
}

/// Where a ZAP request leads, as far as its verdict goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZapTarget {
    /// No socket of this node has the request's domain.
    Unknown,
    /// The node's publisher.
    Publisher,
    /// A bound ROUTER, with the connections open on it that are not admitted there (this
    /// one included: its ACCEPTED event comes before its ZAP request).
    Router {
        /// Open connections of the socket not admitted there.
        unadmitted: usize,
    },
    /// A socket of the domain that is no longer a bound ROUTER (closed meanwhile).
    Gone,
}

/// What the node knows when it answers one ZAP request.
#[derive(Debug, Clone, Copy)]
pub struct ZapFacts<'a> {
    /// The request.
    pub request: &'a ZapRequest,
    /// Where its domain leads.
    pub target: ZapTarget,
    /// Whether the node runs CURVE.
    pub curve: bool,
    /// Whether the request's CURVE key (if it has one) is on the allow-list.
    pub allowed: bool,
    /// `max_unadmitted` of the node's configuration.
    pub max_unadmitted: usize,
}

/// The verdict on one connection's ZAP request: under CURVE its key must be on the
/// allow-list (the key becomes the connection's `User-Id`, the verified security identity
/// admission reads); on a bound ROUTER the unadmitted cap must have room. With the reply,
/// the refusal to count, if the connection is refused for a reason that counts as one.
pub fn judge_zap(f: &ZapFacts<'_>) -> (ZapReply, Option<(InputRefusal, String)>) {
    let reply = |status, text: String, user_id: String| ZapReply {
        request_id: f.request.request_id.clone(),
        status,
        text,
        user_id,
    };
    if f.target == ZapTarget::Unknown {
        let r = reply(
            ZapStatus::AuthFailure,
            "unknown ZAP domain".into(),
            String::new(),
        );
        return (r, None);
    }
    let mut user_id = String::new();
    if f.curve {
        let refused = match f.request.curve_key() {
            Some(key) if f.allowed => {
                user_id = key.to_z85();
                None
            }
            Some(key) => Some(format!("client key {key} is not on the allow-list")),
            None => Some(format!(
                "mechanism {:?}: this endpoint admits CURVE clients only",
                f.request.mechanism
            )),
        };
        if let Some(detail) = refused {
            let r = reply(ZapStatus::AuthFailure, detail.clone(), String::new());
            return (r, Some((InputRefusal::SecurityFailure, detail)));
        }
    }
    match f.target {
        ZapTarget::Router { unadmitted } if unadmitted > f.max_unadmitted => {
            let detail = format!(
                "{} connections not admitted on this endpoint (max_unadmitted {}); refused in \
                 the transport handshake",
                unadmitted - 1,
                f.max_unadmitted
            );
            let r = reply(ZapStatus::Refused, detail.clone(), String::new());
            (r, Some((InputRefusal::UnadmittedCap, detail)))
        }
        _ => (reply(ZapStatus::Ok, "OK".into(), user_id), None),
    }
}

#[cfg(test)]
impl ZapRequest {
    /// A request for tests: id `request_id`, for ZAP domain `domain`, from 127.0.0.1, with
    /// CURVE and `key` as its credential, or NULL without one.
    pub(crate) fn for_test(request_id: &[u8], domain: &str, key: Option<&PublicKey>) -> ZapRequest {
        ZapRequest {
            request_id: request_id.to_vec(),
            domain: domain.into(),
            address: "127.0.0.1".into(),
            mechanism: if key.is_some() {
                Mechanism::Curve
            } else {
                Mechanism::Null
            },
            credentials: key.map(|k| vec![k.as_bytes().to_vec()]).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 32's test vector.
    #[test]
    fn z85_matches_rfc_32() {
        let bytes = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(z85_encode(&bytes).as_deref(), Some("HelloWorld"));
        assert_eq!(z85_decode("HelloWorld").as_deref(), Some(&bytes[..]));
    }

    #[test]
    fn rejects_bad_z85_and_keys() {
        assert_eq!(z85_encode(&[1, 2, 3]), None);
        assert_eq!(z85_decode("Hello"), Some(vec![0x86, 0x4F, 0xD2, 0x6F]));
        assert_eq!(z85_decode("Hell"), None);
        assert_eq!(z85_decode("Hell~"), None);
        // Five '#' (84 each) exceed u32.
        assert_eq!(z85_decode("#####"), None);
        assert!("short".parse::<PublicKey>().is_err());
        let k = PublicKey::from_bytes([7; 32]);
        let text = k.to_z85();
        assert_eq!(text.len(), KEY_Z85_LEN);
        assert_eq!(text.parse::<PublicKey>(), Ok(k));
    }

    #[test]
    fn parses_curve_and_null_zap_requests_and_encodes_replies() {
        let key = [9u8; 32];
        let frames: Vec<&[u8]> = vec![
            b"",
            b"1.0",
            b"7",
            b"zmesh-server",
            b"127.0.0.1",
            b"",
            b"CURVE",
            &key,
        ];
        let r = ZapRequest::parse(&frames).expect("valid");
        assert_eq!(r.domain, "zmesh-server");
        assert_eq!(r.curve_key(), Some(PublicKey::from_bytes(key)));
        let null: Vec<&[u8]> = vec![b"1.0", b"1", b"d", b"", b"", b"NULL"];
        let r = ZapRequest::parse(&null).expect("valid");
        assert_eq!((&r.mechanism, r.curve_key()), (&Mechanism::Null, None));
        let reply = ZapReply {
            request_id: b"7".to_vec(),
            status: ZapStatus::AuthFailure,
            text: "no".into(),
            user_id: String::new(),
        };
        let f = reply.encode();
        assert_eq!(f.len(), 7);
        assert_eq!((&f[1][..], &f[3][..]), (&b"1.0"[..], &b"400"[..]));
    }

    fn curve_request(key: Option<&PublicKey>) -> ZapRequest {
        ZapRequest::for_test(b"7", "zmesh-application", key)
    }

    #[test]
    fn f3_w3_zap_admits_listed_keys_and_refuses_the_rest_with_the_reason_counted() {
        let key = PublicKey::from_slice(&[9u8; KEY_LEN]).unwrap();
        let listed = curve_request(Some(&key));
        let null = curve_request(None);
        let facts = |request, target, curve, allowed| ZapFacts {
            request,
            target,
            curve,
            allowed,
            max_unadmitted: 2,
        };
        let router = ZapTarget::Router { unadmitted: 1 };
        // Listed: OK, with the key as the connection's User-Id; echoes the request id.
        let (r, refused) = judge_zap(&facts(&listed, router, true, true));
        assert_eq!((r.status, refused), (ZapStatus::Ok, None));
        assert_eq!((r.user_id, r.request_id), (key.to_z85(), b"7".to_vec()));
        // Unlisted and no CURVE at all: refused (400), counted as security failures, on
        // the publisher as on a ROUTER.
        for target in [router, ZapTarget::Publisher] {
            let (r, refused) = judge_zap(&facts(&listed, target, true, false));
            assert_eq!(r.status, ZapStatus::AuthFailure);
            assert!(r.user_id.is_empty());
            let (why, detail) = refused.unwrap();
            assert_eq!(why, InputRefusal::SecurityFailure);
            assert!(detail.contains("not on the allow-list"), "{detail}");
            let (r, refused) = judge_zap(&facts(&null, target, true, false));
            assert_eq!(r.status, ZapStatus::AuthFailure);
            assert!(refused.unwrap().1.contains("CURVE clients only"));
        }
        // Without CURVE nothing is checked but the cap, and no User-Id is set.
        let (r, refused) = judge_zap(&facts(&null, router, false, false));
        assert_eq!(
            (r.status, refused, r.user_id),
            (ZapStatus::Ok, None, String::new())
        );
        // An unknown domain is refused and not counted (only libzmq of this node asks).
        let (r, refused) = judge_zap(&facts(&listed, ZapTarget::Unknown, true, true));
        assert_eq!((r.status, refused), (ZapStatus::AuthFailure, None));
        // A socket closed meanwhile: nothing left to protect.
        let (r, _) = judge_zap(&facts(&listed, ZapTarget::Gone, true, true));
        assert_eq!(r.status, ZapStatus::Ok);
    }

    #[test]
    fn w3_zap_refuses_beyond_the_unadmitted_cap_and_counts_it() {
        let request = curve_request(None);
        let at = |unadmitted| {
            judge_zap(&ZapFacts {
                request: &request,
                target: ZapTarget::Router { unadmitted },
                curve: false,
                allowed: false,
                max_unadmitted: 2,
            })
        };
        assert_eq!(at(2).0.status, ZapStatus::Ok);
        let (r, refused) = at(3);
        assert_eq!(r.status, ZapStatus::Refused);
        let (why, detail) = refused.unwrap();
        assert_eq!(why, InputRefusal::UnadmittedCap);
        assert!(detail.starts_with("2 connections not admitted"), "{detail}");
        // The publisher has no cap.
        let (r, _) = judge_zap(&ZapFacts {
            request: &request,
            target: ZapTarget::Publisher,
            curve: false,
            allowed: false,
            max_unadmitted: 0,
        });
        assert_eq!(r.status, ZapStatus::Ok);
    }

    #[test]
    fn w3_f3_a_failed_handshake_on_a_bound_socket_counts_as_security_only_under_curve() {
        for (curve, value, want) in [
            (true, ZMTP_MECHANISM_MISMATCH, InputRefusal::SecurityFailure),
            (true, ZMTP_CRYPTOGRAPHIC, InputRefusal::SecurityFailure),
            (true, 104, InputRefusal::HandshakeFailed),
            (
                false,
                ZMTP_MECHANISM_MISMATCH,
                InputRefusal::HandshakeFailed,
            ),
            (false, ZMTP_CRYPTOGRAPHIC, InputRefusal::HandshakeFailed),
        ] {
            let (why, detail) = handshake_refusal(curve, value);
            assert_eq!(why, want, "curve {curve}, value {value:#x}");
            assert!(detail.contains(&format!("{value:#x}")) || value == ZMTP_MECHANISM_MISMATCH);
        }
    }

    #[test]
    fn rejects_malformed_zap_requests() {
        let short: Vec<&[u8]> = vec![b"1.0", b"1"];
        assert!(ZapRequest::parse(&short).is_err());
        let version: Vec<&[u8]> = vec![b"2.0", b"1", b"d", b"", b"", b"NULL"];
        assert!(ZapRequest::parse(&version).is_err());
        let no_key: Vec<&[u8]> = vec![b"1.0", b"1", b"d", b"", b"", b"CURVE"];
        assert!(ZapRequest::parse(&no_key).is_err());
    }
}
