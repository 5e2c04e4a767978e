//! Shaping a fuzzer's bytes into the inputs parsers expect, so the fuzz
//! targets (see the README's "Fuzzing") reach past a parser's first check
//! instead of dying on it: names of the shared alphabet, `/`-separated
//! paths, and edits of a valid document. For tests only (feature
//! `testing`).

/// A name of `[a-z0-9._-]` (possibly empty), one character per byte.
pub fn name(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789._-";
    bytes
        .iter()
        .map(|&b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .collect()
}

/// A `/`-separated path, one character per byte: mostly letters, with
/// the characters a path rule cares about (`/`, `.`, a control character,
/// a multi-byte one) often enough that both valid and invalid paths come.
pub fn path(bytes: &[u8]) -> String {
    const ALPHABET: [char; 12] = [
        'a', 'b', 'c', 'x', 'y', '0', '/', '/', '.', '.', 'é', '\u{1}',
    ];
    bytes
        .iter()
        .map(|&b| ALPHABET[usize::from(b) % ALPHABET.len()])
        .collect()
}

/// `document` with `edits` applied in order, each `(at, op, byte)`:
/// replace, insert or delete the byte at `at` (modulo the length), so a
/// valid document turns into a near miss of it.
pub fn mutate(document: &[u8], edits: &[(u16, u8, u8)]) -> Vec<u8> {
    let mut out = document.to_vec();
    for &(at, op, byte) in edits {
        let at = usize::from(at) % (out.len() + 1);
        match op % 3 {
            0 if at < out.len() => out[at] = byte,
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                out.remove(at);
            }
            _ => out.push(byte),
        }
    }
    out
}
