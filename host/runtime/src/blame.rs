//! Which plugin failed, when a plugin call fails because of another
//! plugin it asked: a takedown step that asks the retention plugin, which
//! traps. Errors and metrics then name the retention plugin, not the step's
//! plugin that only passed its failure on.
//!
//! The question runs nested in the asking call, on the same thread (a
//! plugin call is synchronous, and so are the host calls it makes), so the
//! blame is kept in a thread-local cell: [`watch`] clears it, runs the
//! call, and takes what was blamed during it.

use std::cell::RefCell;

thread_local! {
    static BLAMED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records that `plugin` (its actor name) failed to answer a question of
/// the call running on this thread; the first blame of a call stands.
pub(crate) fn failed(plugin: &str) {
    BLAMED.with(|cell| {
        let mut blamed = cell.borrow_mut();
        if blamed.is_none() {
            *blamed = Some(plugin.to_owned());
        }
    });
}

/// Runs `call` and returns its result with the plugin blamed during it.
pub(crate) fn watch<T>(call: impl FnOnce() -> T) -> (T, Option<String>) {
    BLAMED.with(|cell| cell.borrow_mut().take());
    let result = call();
    let blamed = BLAMED.with(|cell| cell.borrow_mut().take());
    (result, blamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blame_inside_a_watched_call_is_taken_once_and_the_first_stands() {
        let ((), blamed) = watch(|| {
            failed("plugin:retention@a");
            failed("plugin:retention@b");
        });
        assert_eq!(blamed.as_deref(), Some("plugin:retention@a"));
        let ((), blamed) = watch(|| {});
        assert_eq!(blamed, None);
    }

    #[test]
    fn a_blame_left_over_from_an_unwatched_call_does_not_leak_into_the_next() {
        failed("plugin:retention@stale");
        let ((), blamed) = watch(|| {});
        assert_eq!(blamed, None);
    }
}
