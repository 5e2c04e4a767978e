//! The contract's version: which `custodian:host` and `custodian:policy`
//! packages the host speaks, and which a plugin may be built against.

/// The `custodian:host` and `custodian:policy` versions this host speaks.
/// A plugin built against any `0.1.x` links; `0.2` or `1.x` does not.
pub const CONTRACT_VERSION: &str = "0.1.0";
/// The major version a plugin's imports must have.
const COMPATIBLE_MAJOR: u64 = 0;
/// The minor version a plugin's imports must have (before 1.0 a minor
/// version is a breaking one, as in Cargo's rules).
const COMPATIBLE_MINOR: u64 = 1;

/// Whether a plugin built against `version` (of an import or export,
/// `None` when it names none) links with this host.
pub fn compatible(version: Option<&str>) -> bool {
    let Some(version) = version else { return false };
    let mut parts = version.split('.');
    let number = |p: Option<&str>| p.and_then(|p| p.parse::<u64>().ok());
    number(parts.next()) == Some(COMPATIBLE_MAJOR) && number(parts.next()) == Some(COMPATIBLE_MINOR)
}

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
    fn any_patch_of_the_same_minor_is_compatible_and_nothing_else_is() {
        assert!(compatible(Some("0.1.0")));
        assert!(compatible(Some("0.1.7")));
        for other in ["0.2.0", "1.1.0", "0", "x.y", ""] {
            assert!(!compatible(Some(other)), "{other}");
        }
        assert!(!compatible(None));
    }
}
