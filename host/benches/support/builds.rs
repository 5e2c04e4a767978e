//! Two builds of the bundled takedown plugin for the benchmarks that swap
//! plugins: the bundled bytes, and the same bytes with a custom section,
//! which changes the content hash and nothing else.

/// The bundled takedown plugin, and the same bytes with a custom section
/// named `name`.
pub fn takedown_builds(name: &str) -> [Vec<u8>; 2] {
    let path = custodian::bundled::path(custodian::runtime::World::Takedown).expect("bundled");
    let bundled = std::fs::read(path).expect("the bundled takedown plugin is readable");
    let mut other = bundled.clone();
    // A custom section (id 0): its size, then its name's length and the
    // name; both lengths fit one LEB128 byte for a short name.
    assert!(name.len() < 127, "a short section name");
    other.extend_from_slice(&[0, (name.len() + 1) as u8, name.len() as u8]);
    other.extend_from_slice(name.as_bytes());
    [bundled, other]
}
