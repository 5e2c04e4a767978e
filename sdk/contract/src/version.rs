//! The contract's version: which `custodian:host` and `custodian:policy`
//! packages the host speaks, and which a plugin may be built against.

/// The `custodian:host` and `custodian:policy` versions this host speaks.
/// A plugin built against any `0.2.x` links natively; one built against
/// `0.1.x` still links, through the runtime's frozen copy of the 0.1
/// contract; `0.3` or `1.x` does not.
pub const CONTRACT_VERSION: &str = "0.2.0";
/// The `major.minor` series a plugin's imports and exports may have,
/// oldest first (before 1.0 a minor version is a breaking one, as in
/// Cargo's rules, so each series is a contract of its own). The last is
/// [`CONTRACT_VERSION`]'s.
pub const COMPATIBLE_SERIES: [(u64, u64); 2] = [(0, 1), (0, 2)];

/// The series (`(major, minor)`) of `version`, if it is a version at all.
pub fn series(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a plugin built against `version` (of an import or export,
/// `None` when it names none) links with this host: any `0.1.x` or `0.2.x`,
/// nothing else.
pub fn compatible(version: Option<&str>) -> bool {
    version
        .and_then(series)
        .is_some_and(|s| COMPATIBLE_SERIES.contains(&s))
}

/// [`COMPATIBLE_SERIES`] as messages name it.
pub const COMPATIBLE_DESCRIPTION: &str = "0.1.x or 0.2.x";

/// The `custodian:host` interfaces the host provides.
pub const HOST_INTERFACES: [&str; 7] = [
    "types", "kv", "objects", "checksum", "clock", "audit", "log",
];

/// The `custodian:policy` interfaces a policy world imports: they carry
/// only types shared by several worlds (`steps`: a timer step's input and
/// result; `retention-types`: what retention is asked and answers), so the
/// host provides them as empty instances.
pub const POLICY_TYPE_INTERFACES: [&str; 2] = ["steps", "retention-types"];

/// The `custodian:policy` interfaces the host implements by routing to
/// another policy (`retention-oracle`: questions to the retention plugin).
pub const POLICY_SERVICE_INTERFACES: [&str; 1] = ["retention-oracle"];

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn any_patch_of_the_0_1_or_0_2_series_is_compatible_and_nothing_else_is() {
        for ok in ["0.1.0", "0.1.7", "0.2.0", "0.2.3", super::CONTRACT_VERSION] {
            assert!(compatible(Some(ok)), "{ok}");
        }
        for other in ["0.3.0", "0.0.1", "1.0.0", "1.1.0", "2.2.0", "0", "x.y", ""] {
            assert!(!compatible(Some(other)), "{other}");
        }
        assert!(!compatible(None));
    }

    #[test]
    fn the_host_speaks_the_newest_compatible_series() {
        let newest = *super::COMPATIBLE_SERIES.last().unwrap();
        assert_eq!(super::series(super::CONTRACT_VERSION), Some(newest));
        for (major, minor) in super::COMPATIBLE_SERIES {
            let series = alloc::format!("{major}.{minor}.x");
            assert!(super::COMPATIBLE_DESCRIPTION.contains(series.as_str()));
        }
    }
}
