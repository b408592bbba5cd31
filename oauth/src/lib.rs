//! # oauth
//!
//! toolhost's HTTP server as an OAuth 2.1 resource server, as the MCP authorization
//! specification has it: a caller's access token is checked ([`ResourceServer`]) and names
//! who is calling ([`Identity`]); clients discover where to log in from the protected
//! resource metadata (RFC 9728) and the `WWW-Authenticate` challenge that points at it.
//!
//! - A JWT access token is checked against its issuer's keys: the JWKS, found through the
//!   issuer's metadata (OpenID Connect discovery, else RFC 8414), kept, and fetched again
//!   for a key id it does not hold (at most once per `keys_min_refresh_secs`, a failed fetch
//!   included, so an issuer out of reach is not waited on by every request) or, in the
//!   background, once it is older than `keys_max_age_secs`. Then `iss` (one of the configured issuers), `aud` (this
//!   server's resource URI, RFC 8707), `exp` and `nbf` (with `leeway_secs`), and the
//!   algorithm: only an asymmetric one the key allows (RS/PS 256–512 for RSA keys, ES256 for
//!   P-256, ES384 for P-384, EdDSA for Ed25519); `none` and HMAC are refused.
//! - Any other token is checked by introspection (RFC 7662) when `[http.auth.introspection]`
//!   is set.
//! - A caller's token is exchanged (RFC 8693) for one to another resource, for the same
//!   caller, at the issuer this server is a client of (`[http.auth.client]`): what a mounted
//!   MCP server that needs the caller's own credentials gets.
//! - toolhost logs in to a remote MCP server that requires it ([`login`]) and keeps the
//!   login outside every workspace ([`logins`]).
//! - A token is never logged, nor put in an error: errors name the claim or the key.

mod callback;
mod client;
mod error;
mod exchange;
mod identity;
mod introspection;
mod issuer;
mod jwk;
mod jwt;
mod kept;
pub mod login;
pub mod logins;
mod resource_server;
mod settings;

pub use error::{Rejected, SettingsError};
pub use exchange::Exchanged;
pub use identity::Identity;
pub use kept::Kept;
pub use resource_server::ResourceServer;
pub use settings::{ClientSettings, ConsoleSettings, IntrospectionSettings, Settings};

/// The largest token taken (bytes): a bigger `Authorization` header is refused before it
/// is parsed.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
