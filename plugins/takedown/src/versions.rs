//! Deleting every stored generation of one object key: what a purge does
//! to a preserved piece and a removal to a serving copy.

use custodian_sdk::{Error, objects};

/// Versions listed per page.
pub const VERSIONS_PER_PAGE: u32 = 16;

/// Destroys every stored generation of `key` in `store`, and returns how
/// many of them carried bytes (0: nothing was there; deleting what is
/// absent is fine, so a destroy may be repeated). On a versioned store
/// that is each version and delete marker: a plain delete would leave
/// the bytes readable by version id. An unversioned store answers
/// `list-key-versions` with `unsupported`; there the current object is all
/// there is.
///
/// At most `pages` listings of [`VERSIONS_PER_PAGE`] versions are deleted
/// (a key has one version, plus one per rewrite); past that the call
/// fails with `unavailable` and the next attempt continues, rather than
/// spending a call's budget.
pub fn destroy(store: &str, key: &str, pages: usize) -> Result<u32, Error> {
    let mut found = 0;
    for _ in 0..pages {
        let page = match objects::list_key_versions(store, key, None, VERSIONS_PER_PAGE) {
            Ok(page) => page,
            Err(Error::Unsupported(_)) => {
                return match objects::head(store, key) {
                    Ok(_) => objects::delete(store, key).map(|()| 1),
                    Err(Error::NotFound(_)) => Ok(0),
                    Err(other) => Err(other),
                };
            }
            Err(other) => return Err(other),
        };
        for version in &page.versions {
            found += u32::from(!version.is_delete_marker);
            objects::delete_version(store, key, &version.version_id)?;
        }
        // A page without `next` was the last: every version is deleted,
        // and a key's one version costs one listing. (Another listing
        // would not close the window for a writer anyway; what keeps a
        // denied key from being written again is the host's denial.)
        // Otherwise the next page starts afresh, since the versions of
        // this one are gone.
        if page.next.is_none() {
            return Ok(found);
        }
    }
    Err(Error::Unavailable(format!(
        "{store}/{key} has more versions than one call deletes; the next attempt continues"
    )))
}
