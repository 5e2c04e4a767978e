//! Encodings shared by every row: lowercase hex for ids and cursors, JSON
//! for records, and the errors a bad row turns into.

use custodian_sdk::Error;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A 32-byte content or request id.
pub type Id = [u8; 32];

/// Longest message kept in a stored error (`last_error`) or audit detail:
/// host messages can be long, and a state row must stay small.
const MAX_MESSAGE_BYTES: usize = 1024;

/// `Error::Corrupt` with `message`.
pub fn corrupt(message: impl Into<String>) -> Error {
    Error::Corrupt(message.into())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// The bytes of lowercase (or uppercase) hex `text`; `None` if it is not
/// hex of whole bytes.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// An id from hex, or `Corrupt` naming `what`.
pub fn id_from_hex(text: &str, what: &str) -> Result<Id, Error> {
    unhex(text)
        .and_then(|bytes| Id::try_from(bytes).ok())
        .ok_or_else(|| corrupt(format!("{what} is not a 32-byte hex id")))
}

/// The JSON encoding of a record this policy stores.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|e| Error::InvalidArgument(format!("encoding a row: {e}")))
}

/// A stored record, or `Corrupt` naming `what` if it does not decode.
pub fn decode<T: DeserializeOwned>(raw: &[u8], what: &str) -> Result<T, Error> {
    serde_json::from_slice(raw).map_err(|e| corrupt(format!("{what} does not decode: {e}")))
}

/// `message` cut to at most `MAX_MESSAGE_BYTES` (1 KiB), on a character boundary.
pub fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}

/// A host error as text, for a stored `last_error` or an audit detail.
pub fn describe(error: &Error) -> String {
    let text = match error {
        Error::NotFound(m) => format!("not found: {m}"),
        Error::PreconditionFailed(m) => format!("precondition failed: {m}"),
        Error::Conflict(m) => format!("conflict: {m}"),
        Error::ChecksumMismatch(m) => format!("checksum mismatch: {m}"),
        Error::Corrupt(m) => format!("corrupt: {m}"),
        Error::Unavailable(m) => format!("unavailable: {m}"),
        Error::BudgetExhausted(m) => format!("budget exhausted: {m}"),
        Error::AccessDenied(m) => format!("access denied: {m}"),
        Error::InvalidArgument(m) => format!("invalid argument: {m}"),
        Error::Unsupported(m) => format!("unsupported: {m}"),
        Error::Other(m) => format!("failed: {m}"),
    };
    bounded(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_odd_or_foreign_text() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(unhex("00ab7f"), Some(vec![0x00, 0xab, 0x7f]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn bounded_messages_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
