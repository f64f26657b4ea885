//! `meshnode didcomm pack` and `meshnode didcomm unpack`: DIDComm Messaging v2
//! ([`fleetmesh_proto::didcomm`]) from and to a node's keys on the command line — for an
//! operator to talk to any DIDComm agent by its DID document, and to script.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use fleetmesh_proto::didcomm::{self, Enc, Message, Pack, PeerDoc, SignWith};
use serde_json::{Value, json};

use crate::cli::Outcome;

/// Most bytes of a DID document or a message these commands read.
const MAX_INPUT: u64 = didcomm::MAX_MESSAGE_BYTES as u64;

/// `meshnode didcomm …`.
#[derive(Debug, Subcommand)]
pub enum DidcommCommand {
    /// Pack a message for a DID: authcrypt from this node's key (the default), anoncrypt
    /// (--anon), or signed only (--sign without --anon/--auth); prints it, one JSON line.
    Pack(PackArgs),
    /// Open a message addressed to this node: every layer checked; prints the message and
    /// what its layers proved. Exit 2, naming the layer and the check, when it does not.
    Unpack(UnpackArgs),
}

/// `meshnode didcomm pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The recipient's DID document (JSON: `meshnode did show`, `did resolve`, or any DID
    /// Core document with X25519 key agreement).
    #[arg(long, value_name = "DID_DOC.json")]
    pub to: PathBuf,
    /// The sender's key directory (a node directory will do).
    #[arg(long, value_name = "DIR")]
    pub key_dir: PathBuf,
    /// Anoncrypt (ECDH-ES+A256KW): the recipient learns nothing of the sender from the
    /// encryption.
    #[arg(long, conflicts_with = "auth")]
    pub anon: bool,
    /// Authcrypt (ECDH-1PU+A256KW), the default unless --sign is given alone.
    #[arg(long)]
    pub auth: bool,
    /// Sign (JWS) with the Ed25519 key (EdDSA) or the Nostr key (ES256K); alone, the
    /// message is signed and not encrypted.
    #[arg(long, value_name = "ed25519|secp256k1", num_args = 0..=1, default_missing_value = "ed25519")]
    pub sign: Option<String>,
    /// Authcrypt inside anoncrypt, so that relays and mediators do not see the sender.
    #[arg(long)]
    pub protect_sender: bool,
    /// Content encryption of the anoncrypt layer.
    #[arg(
        long,
        value_name = "A256CBC-HS512|A256GCM|XC20P",
        default_value = "A256CBC-HS512"
    )]
    pub enc: String,
    /// The message type URI.
    #[arg(
        long = "type",
        value_name = "URI",
        default_value = "https://fleetmesh.org/basic/1.0/message"
    )]
    pub type_: String,
    /// The thread id.
    #[arg(long, value_name = "ID")]
    pub thid: Option<String>,
    /// Seconds the message stays valid.
    #[arg(long, value_name = "SECS")]
    pub expires_in: Option<u64>,
    /// The DID document of a mediator the recipient's DIDCommMessaging service routes
    /// through (its routingKeys); repeatable. The message is wrapped in a forward for each.
    #[arg(long = "mediator-doc", value_name = "DOC.json")]
    pub mediators: Vec<PathBuf>,
    /// The body, JSON.
    #[arg(long, value_name = "JSON")]
    pub body: String,
}

/// `meshnode didcomm unpack`.
#[derive(Debug, Args)]
pub struct UnpackArgs {
    /// The recipient's key directory (a node directory will do).
    #[arg(long, value_name = "DIR")]
    pub key_dir: PathBuf,
    /// The DID document of a sender (authcrypt, or a signature by a key the DID alone
    /// does not give); repeatable.
    #[arg(long = "sender-doc", value_name = "DOC.json")]
    pub sender_docs: Vec<PathBuf>,
    /// The packed message (`-`: standard input).
    pub message: PathBuf,
}

/// A DID document from a file.
pub(crate) fn read_doc(path: &std::path::Path) -> anyhow::Result<PeerDoc> {
    let text = crate::cli::read_input(path, MAX_INPUT, "a DID document")?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    PeerDoc::parse(&value).with_context(|| format!("{}: not a usable DID document", path.display()))
}

fn sign_with(name: &str) -> anyhow::Result<SignWith> {
    match name {
        "ed25519" => Ok(SignWith::Ed25519),
        "secp256k1" => Ok(SignWith::Secp256k1),
        other => anyhow::bail!("--sign {other:?}: ed25519 or secp256k1"),
    }
}

/// `meshnode didcomm pack`.
pub fn pack(args: &PackArgs) -> anyhow::Result<Outcome> {
    let to = read_doc(&args.to)?;
    let (_, keys) = crate::cli::job::keys_in(&args.key_dir, "the sender's keys")?;
    let body: Value = serde_json::from_str(&args.body).context("--body is not JSON")?;
    let enc = Enc::parse(&args.enc)
        .with_context(|| format!("--enc {:?}: A256CBC-HS512, A256GCM or XC20P", args.enc))?;
    let sign = args.sign.as_deref().map(sign_with).transpose()?;
    let mut msg = Message::new(&args.type_, body)?;
    msg.to = vec![to.did.clone()];
    msg.thid.clone_from(&args.thid);
    msg.expires_time = args
        .expires_in
        .map(|s| msg.created_time.unwrap_or_default() + s);
    let encrypt = args.anon || args.auth || args.protect_sender || sign.is_none();
    if !args.anon || sign.is_some() {
        msg.from = Some(keys.did());
    }
    let packed = if encrypt {
        let how = Pack {
            auth: !args.anon,
            sign,
            protect_sender: args.protect_sender,
            enc,
        };
        anyhow::ensure!(
            !(args.anon && args.protect_sender),
            "--protect-sender hides an authcrypt sender; it does not go with --anon"
        );
        let packed = didcomm::pack_encrypted(&msg, &keys, &to, how)?;
        route(packed, &to, &args.mediators)?
    } else {
        didcomm::pack_signed(&msg, &keys, sign.unwrap_or(SignWith::Ed25519))?
    };
    println!("{packed}");
    Ok(Outcome::Ok)
}

/// Wraps `packed` in a forward per routing key of the recipient's first DIDCommMessaging
/// service: the first key is the first hop, so it is the outermost wrap; each forward
/// names the next hop (the recipient's DID innermost, else the next routing key).
fn route(packed: Value, to: &PeerDoc, mediator_docs: &[PathBuf]) -> anyhow::Result<Value> {
    let mediators = mediator_docs
        .iter()
        .map(|p| read_doc(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let routing = to
        .services
        .first()
        .map(|s| s.routing_keys.clone())
        .unwrap_or_default();
    anyhow::ensure!(
        !routing.is_empty() || mediators.is_empty(),
        "--mediator-doc given, but {} routes through no mediator",
        to.did
    );
    let mut packed = packed;
    let mut next = to.did.clone();
    for key in routing.iter().rev() {
        let mediator = mediators
            .iter()
            .find(|m| m.did == didcomm::did_of(key))
            .with_context(|| format!("{} routes through {key}: give its --mediator-doc", to.did))?;
        packed = didcomm::forward(&packed, &next, mediator, key)?;
        next.clone_from(key);
    }
    Ok(packed)
}

/// `meshnode didcomm unpack`: prints `{"message", "meta"}`, one JSON line.
pub fn unpack(args: &UnpackArgs) -> anyhow::Result<Outcome> {
    let (_, keys) = crate::cli::job::keys_in(&args.key_dir, "the recipient's keys")?;
    let docs = args
        .sender_docs
        .iter()
        .map(|p| read_doc(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let text = crate::cli::read_input(&args.message, MAX_INPUT, "a message")?;
    let now = fleetmesh_proto::unix_now();
    let unpacked = didcomm::unpack(text.trim().as_bytes(), &keys, &docs, now)
        .context("the message does not open")?;
    println!(
        "{}",
        json!({"message": unpacked.message.to_json(), "meta": unpacked.meta})
    );
    Ok(Outcome::Ok)
}
