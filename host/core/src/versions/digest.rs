//! Content digests a pin may carry, and how bytes are hashed for them.
//!
//! - `md5`: the MD5 of the bytes, 32 lowercase hex digits (DVC 3's
//!   `hash: md5`).
//! - `md5-dos2unix`: DVC 2's hash. A file DVC takes for text is hashed
//!   with every CRLF turned into LF; a binary file is hashed as it is.
//!   This module detects binary the way DVC does (its `istextblock`): the
//!   first [`TEXT_SNIFF_BYTES`] bytes are text unless they hold a NUL or
//!   more than 30% bytes outside printable ASCII and `\n\r\t\f\b`.
//!   CRLF pairs are joined across block boundaries.
//! - `crc64nvme`: the CRC-64/NVME of the bytes, 16 lowercase hex digits,
//!   which stores record: verify compares it with the store's record,
//!   fetch with the bytes.

use md5::Digest as _;

/// How much of a file decides whether `md5-dos2unix` treats it as text
/// (DVC's block size for the same test).
pub const TEXT_SNIFF_BYTES: usize = 512;

/// A pinned content digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(tag = "hash", content = "value")]
pub enum Digest {
    /// MD5 of the bytes, lowercase hex.
    #[serde(rename = "md5")]
    Md5(String),
    /// MD5 of the bytes with CRLF → LF for text (see the module doc).
    #[serde(rename = "md5-dos2unix")]
    Md5Dos2Unix(String),
    /// CRC-64/NVME of the bytes, lowercase hex.
    #[serde(rename = "crc64nvme")]
    Crc64Nvme(String),
}

impl Digest {
    /// Builds a digest from its algorithm name and value, checking the
    /// form: 32 lowercase hex digits for the MD5s, 16 for the CRC.
    ///
    /// # Errors
    /// A message naming what is wrong; callers add the pin.
    pub fn parse(algorithm: &str, value: &str) -> Result<Self, String> {
        let (digits, make): (usize, fn(String) -> Self) = match algorithm {
            "md5" => (32, Self::Md5),
            "md5-dos2unix" => (32, Self::Md5Dos2Unix),
            "crc64nvme" => (16, Self::Crc64Nvme),
            other => {
                return Err(format!(
                    "unsupported hash {other:?} (md5, md5-dos2unix or crc64nvme)"
                ));
            }
        };
        if value.ends_with(".dir") {
            return Err(format!(
                "{value:?} is a directory digest (.dir): pin the files of the directory instead"
            ));
        }
        if value.len() != digits
            || !value
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(format!(
                "{algorithm} digest {value:?} is not {digits} lowercase hex digits"
            ));
        }
        Ok(make(value.to_owned()))
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Self::Md5(_) => "md5",
            Self::Md5Dos2Unix(_) => "md5-dos2unix",
            Self::Crc64Nvme(_) => "crc64nvme",
        }
    }

    /// The hex value.
    pub fn value(&self) -> &str {
        match self {
            Self::Md5(v) | Self::Md5Dos2Unix(v) | Self::Crc64Nvme(v) => v,
        }
    }

    /// A hasher for this digest's algorithm.
    pub fn hasher(&self) -> Hasher {
        match self {
            Self::Md5(_) => Hasher::Md5(md5::Md5::new()),
            Self::Md5Dos2Unix(_) => Hasher::Dos2Unix {
                md5: md5::Md5::new(),
                head: Vec::new(),
                text: None,
                pending_cr: false,
            },
            Self::Crc64Nvme(_) => Hasher::Crc(custodian_base::checksum::Crc64Nvme::new()),
        }
    }

    /// The digest of `bytes` under this digest's algorithm, as hex.
    pub fn of(&self, bytes: &[u8]) -> String {
        let mut hasher = self.hasher();
        hasher.update(bytes);
        hasher.finish()
    }
}

/// A streaming hasher for one of the [`Digest`] algorithms: any split of
/// the input into `update` calls gives the same value.
pub enum Hasher {
    /// Plain MD5.
    Md5(md5::Md5),
    /// DVC's dos2unix MD5: the first block decides text or binary.
    Dos2Unix {
        /// The MD5 so far.
        md5: md5::Md5,
        /// The first bytes, held until text or binary is decided.
        head: Vec<u8>,
        /// `Some(true)` once decided to be text.
        text: Option<bool>,
        /// A text stream's last byte was a held-back CR.
        pending_cr: bool,
    },
    /// CRC-64/NVME.
    Crc(custodian_base::checksum::Crc64Nvme),
}

impl Hasher {
    /// Feeds the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Md5(md5) => md5.update(data),
            Self::Crc(crc) => crc.update(data),
            Self::Dos2Unix {
                md5,
                head,
                text,
                pending_cr,
            } => match *text {
                Some(true) => feed_text(md5, pending_cr, data),
                Some(false) => md5.update(data),
                None => {
                    head.extend_from_slice(data);
                    if head.len() >= TEXT_SNIFF_BYTES {
                        let is_text = is_text_block(&head[..TEXT_SNIFF_BYTES]);
                        *text = Some(is_text);
                        let held = std::mem::take(head);
                        if is_text {
                            feed_text(md5, pending_cr, &held);
                        } else {
                            md5.update(&held);
                        }
                    }
                }
            },
        }
    }

    /// The digest of everything fed, as lowercase hex.
    pub fn finish(self) -> String {
        match self {
            Self::Md5(md5) => hex::encode(md5.finalize()),
            Self::Crc(crc) => format!("{:016x}", crc.finalize()),
            Self::Dos2Unix {
                mut md5,
                head,
                text,
                mut pending_cr,
            } => {
                match text {
                    Some(_) => {}
                    None if is_text_block(&head) => feed_text(&mut md5, &mut pending_cr, &head),
                    None => md5.update(&head),
                }
                if pending_cr {
                    md5.update(b"\r");
                }
                hex::encode(md5.finalize())
            }
        }
    }
}

/// Feeds `data` with CRLF → LF, holding back a trailing CR until the next
/// byte is known.
fn feed_text(md5: &mut md5::Md5, pending_cr: &mut bool, data: &[u8]) {
    let mut out = Vec::with_capacity(data.len() + 1);
    let mut bytes = data.iter().copied().peekable();
    if std::mem::take(pending_cr) && bytes.peek() != Some(&b'\n') {
        out.push(b'\r');
    }
    while let Some(byte) = bytes.next() {
        if byte == b'\r' {
            match bytes.peek() {
                Some(b'\n') => {}
                Some(_) => out.push(b'\r'),
                None => *pending_cr = true,
            }
        } else {
            out.push(byte);
        }
    }
    md5.update(&out);
}

/// DVC's text test: no NUL, and at most 30% of bytes outside printable
/// ASCII and `\n\r\t\f\b`. Empty is text.
fn is_text_block(block: &[u8]) -> bool {
    if block.is_empty() {
        return true;
    }
    if block.contains(&0) {
        return false;
    }
    let nontext = block
        .iter()
        .filter(|&&b| !((32..127).contains(&b) || matches!(b, b'\n' | b'\r' | b'\t' | 0x0c | 0x08)))
        .count();
    nontext * 10 <= block.len() * 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md5_hex(data: &[u8]) -> String {
        Digest::Md5(String::new()).of(data)
    }

    #[test]
    fn md5_of_known_input_is_the_reference_value() {
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn digests_must_be_lowercase_hex_of_the_right_length() {
        assert!(Digest::parse("md5", "900150983cd24fb0d6963f7d28e17f72").is_ok());
        assert!(Digest::parse("md5", "900150983CD24FB0D6963F7D28E17F72").is_err());
        assert!(Digest::parse("md5", "90015098").is_err());
        assert!(Digest::parse("md5-dos2unix", "900150983cd24fb0d6963f7d28e17f7g").is_err());
        assert!(Digest::parse("crc64nvme", "ae8b14860a799888").is_ok());
        assert!(Digest::parse("crc64nvme", "900150983cd24fb0d6963f7d28e17f72").is_err());
        assert!(Digest::parse("sha256", "ae8b14860a799888").is_err());
    }

    #[test]
    fn a_directory_digest_is_refused_saying_so() {
        let error = Digest::parse("md5", "900150983cd24fb0d6963f7d28e17f72.dir").unwrap_err();
        assert!(error.contains("directory"), "{error}");
    }

    #[test]
    fn crc64nvme_of_the_check_string_is_the_catalogue_value() {
        let digest = Digest::Crc64Nvme(String::new());
        assert_eq!(digest.of(b"123456789"), "ae8b14860a799888");
    }

    #[test]
    fn dos2unix_hashes_text_with_lf_line_ends_and_binary_as_is() {
        let dos = Digest::Md5Dos2Unix(String::new());
        assert_eq!(dos.of(b"a\r\nb\r\n"), md5_hex(b"a\nb\n"));
        assert_eq!(dos.of(b"lone\rcr"), md5_hex(b"lone\rcr"));
        let binary = b"\0\r\n\x01";
        assert_eq!(dos.of(binary), md5_hex(binary));
    }

    #[test]
    fn dos2unix_gives_the_same_digest_for_any_split_of_the_input() {
        let mut text = Vec::new();
        for i in 0..400 {
            text.extend_from_slice(format!("line {i}\r\n").as_bytes());
        }
        let dos = Digest::Md5Dos2Unix(String::new());
        let whole = dos.of(&text);
        assert_eq!(whole, md5_hex(&text.replace_crlf()));
        for split in [1, 7, 511, 512, 513, 1000] {
            let mut hasher = dos.hasher();
            for chunk in text.chunks(split) {
                hasher.update(chunk);
            }
            assert_eq!(hasher.finish(), whole, "split {split}");
        }
    }

    trait ReplaceCrlf {
        fn replace_crlf(&self) -> Vec<u8>;
    }

    impl ReplaceCrlf for Vec<u8> {
        fn replace_crlf(&self) -> Vec<u8> {
            String::from_utf8(self.clone())
                .unwrap()
                .replace("\r\n", "\n")
                .into_bytes()
        }
    }
}
