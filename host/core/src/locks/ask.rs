//! Asking the retention plugin whether a version may be destroyed, from
//! async code.
//!
//! [`RetentionOracle::assess`] is synchronous and runs a WebAssembly call,
//! so it runs on the blocking pool, never on an async worker. Callers may
//! themselves be on a blocking thread, inside a plugin's host call that
//! drives the store with `Handle::block_on`: that thread only waits for the
//! answer, which another blocking thread computes, and the retention call
//! needs nothing the waiting call holds (it is granted no store or KV, and
//! takes its own instance slot; when every slot is taken it fails `Busy`
//! at once rather than waiting). So no wait forms a cycle.

use std::sync::Arc;

use crate::decisions::retention::{Item, RetentionOracle, Verdict};

/// Why the retention plugin gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unanswered(pub String);

/// Retention's `may-delete` for `item` at `now_ms`, with the content hash
/// of the plugin that answered, when known.
///
/// # Errors
/// [`Unanswered`] when the plugin failed to answer (its own error, a trap,
/// a limit, none bound, or the blocking task was lost).
pub(crate) async fn may_delete(
    oracle: &Arc<dyn RetentionOracle>,
    item: Item,
    now_ms: u64,
) -> (Result<Verdict, Unanswered>, Option<String>) {
    let oracle = oracle.clone();
    match tokio::task::spawn_blocking(move || oracle.assess_by(item, now_ms)).await {
        Ok((Ok(assessment), by)) => (Ok(assessment.may_delete), by),
        Ok((Err(error), by)) => (Err(Unanswered(error.to_string())), by),
        Err(lost) => (
            Err(Unanswered(format!("the retention call was lost: {lost}"))),
            None,
        ),
    }
}
