//! Archive task prefixes: the rules receipts and registries share.
//!
//! A task moves everything under a source prefix to a destination prefix
//! with the same leaf name (`a/data` → `archive/2024/data`); an object's
//! destination is the destination prefix followed by its suffix under the
//! source.

/// Checks one task prefix: not empty, no leading `/`, no empty, `.` or
/// `..` segments.
///
/// # Errors
/// A message naming the prefix.
pub fn validate(prefix: &str) -> Result<(), String> {
    if prefix.is_empty()
        || prefix.starts_with('/')
        || prefix
            .split('/')
            .any(|part| part.is_empty() || matches!(part, "." | ".."))
    {
        return Err(format!(
            "invalid task prefix {prefix:?} (empty, leading '/', or an empty, '.' or '..' segment)"
        ));
    }
    Ok(())
}

/// Checks a task's pair of prefixes: each valid, different, disjoint (one
/// is not inside the other) and with the same leaf name.
///
/// # Errors
/// A message saying which rule failed.
pub fn validate_pair(source: &str, destination: &str) -> Result<(), String> {
    validate(source)?;
    validate(destination)?;
    if source == destination {
        return Err(format!("source and destination are both {source:?}"));
    }
    if source.starts_with(&format!("{destination}/"))
        || destination.starts_with(&format!("{source}/"))
    {
        return Err(format!(
            "source {source:?} and destination {destination:?} overlap"
        ));
    }
    if source.rsplit('/').next() != destination.rsplit('/').next() {
        return Err(format!(
            "source {source:?} and destination {destination:?} have different leaf names"
        ));
    }
    Ok(())
}

/// Checks that `destination_object` is where the task moves
/// `source_object`.
///
/// # Errors
/// A message naming the object.
pub fn check_moved(
    source: &str,
    destination: &str,
    source_object: &str,
    destination_object: &str,
) -> Result<(), String> {
    let suffix = source_object
        .strip_prefix(source)
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|suffix| !suffix.is_empty())
        .ok_or_else(|| format!("object {source_object:?} is not under the source {source:?}"))?;
    if destination_object != format!("{destination}/{suffix}") {
        return Err(format!(
            "object {source_object:?} would move to {destination:?}/{suffix}, not {destination_object:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_prefixes_must_be_clean_relative_paths() {
        for bad in ["", "/a", "a//b", "a/./b", "a/..", "a/"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
        assert!(validate("a/b").is_ok());
    }

    #[test]
    fn a_task_pair_must_differ_be_disjoint_and_share_its_leaf_name() {
        assert!(validate_pair("a/data", "archive/data").is_ok());
        assert!(validate_pair("a/data", "a/data").is_err());
        assert!(validate_pair("data", "data/x/data").is_err());
        assert!(validate_pair("a/data", "b/other").is_err());
    }

    #[test]
    fn an_object_moves_to_the_destination_plus_its_suffix() {
        assert!(check_moved("a/d", "b/d", "a/d/x/y", "b/d/x/y").is_ok());
        assert!(check_moved("a/d", "b/d", "a/d/x/y", "b/d/y").is_err());
        assert!(check_moved("a/d", "b/d", "a/dx/y", "b/dx/y").is_err());
        assert!(check_moved("a/d", "b/d", "a/d", "b/d").is_err());
    }
}
