//! How a listing marks content a takedown withholds: the entry is still
//! listed, so owners see what happened, with the request that withholds
//! it (reads of it answer 451, see [`ApiError`](super::ApiError)).

use serde::Serialize;

use custodian_core::content::Withheld;

/// The `"taken_down"` field of a listed entry or object.
#[derive(Debug, Serialize)]
pub(super) struct TakenDown {
    /// The request (64 hex digits).
    request: String,
    /// When its denial took effect.
    since_ms: u64,
}

impl From<Withheld> for TakenDown {
    fn from(withheld: Withheld) -> Self {
        Self {
            request: withheld.request.to_hex(),
            since_ms: withheld.since_ms,
        }
    }
}
