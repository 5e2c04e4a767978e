//! S3's XML: a [`Writer`] for the answers, and parsers for the two request
//! bodies the endpoint reads, [`parse_delete`] (DeleteObjects) and
//! [`parse_complete`] (CompleteMultipartUpload).
//!
//! The parsers take the document as a whole, already bounded by the
//! caller ([`MAX_BODY_BYTES`]), and refuse anything that is not the
//! expected document with `MalformedXML`: a DTD (no entity expansion, so
//! no billion laughs), unknown elements where S3 has none, text outside
//! the leaves, more entries than S3 allows. Only the five predefined
//! entities and numeric character references are decoded.

use std::borrow::Cow;

use xmlparser::{ElementEnd, Token, Tokenizer};

use crate::error::{Code, S3Error};

/// The S3 namespace every answer's root element declares.
pub const NAMESPACE: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// Largest request body parsed, in bytes: 1,000 keys of 1 KiB with their
/// version ids and markup fit (S3's own limit on a DeleteObjects body is
/// 1,000 keys; a Complete of 10,000 parts is ~1.5 MiB with checksums).
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// Most keys one DeleteObjects names (S3's limit).
pub const MAX_DELETE_KEYS: usize = 1000;

/// Most parts one Complete lists (S3's limit on a multipart upload).
pub const MAX_PARTS: usize = 10_000;

/// What a key keeps when an answer percent-encodes it
/// (`encoding-type=url`): the unreserved characters and `/`, as a URL
/// path; so `+`, which a decoder of forms would take for a space, is
/// encoded too.
pub const KEY_ENCODE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Deepest element nesting accepted: the deepest document read is three
/// levels (`Delete/Object/Key`); anything deeper is not one of them.
const MAX_DEPTH: usize = 4;

/// Builds an XML document: elements opened and closed in order, text
/// escaped.
#[derive(Debug)]
pub struct Writer {
    out: String,
}

impl Writer {
    /// A document with its XML declaration.
    pub fn document() -> Self {
        Self {
            out: String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
        }
    }

    /// Opens the root element `name` in S3's namespace.
    pub fn open_root(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str(" xmlns=\"");
        self.out.push_str(NAMESPACE);
        self.out.push_str("\">");
    }

    /// Opens element `name`.
    pub fn open(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
    }

    /// Closes element `name`.
    pub fn close(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }

    /// `<name>text</name>`, the text escaped.
    pub fn text_element(&mut self, name: &str, text: &str) {
        self.open(name);
        escape_into(&mut self.out, text);
        self.close(name);
    }

    /// `<name>text</name>` when there is a text.
    pub fn optional(&mut self, name: &str, text: Option<&str>) {
        if let Some(text) = text {
            self.text_element(name, text);
        }
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The XML document S3 sends with `error` (`HEAD` answers and 304s carry
/// none; the caller leaves it out for those).
pub fn error_document(error: &S3Error, request_id: &str) -> String {
    let mut w = Writer::document();
    w.open("Error");
    w.text_element("Code", error.code.as_str());
    w.text_element("Message", &error.message);
    w.optional("Resource", error.resource.as_deref());
    w.text_element("RequestId", request_id);
    w.close("Error");
    w.finish()
}

/// Appends `text` to `out`, escaped for element content and attribute
/// values. Characters XML 1.0 cannot carry at all (controls other than
/// tab, newline and carriage return) are written as character references
/// as S3 does; clients that cannot read them asked for `encoding-type=url`.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push_str(&format!("&#x{:X};", c as u32)),
            c => out.push(c),
        }
    }
}

/// One key a DeleteObjects names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteEntry {
    /// The key.
    pub key: String,
    /// The exact version, when one is named.
    pub version_id: Option<String>,
}

/// A DeleteObjects request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// The keys, in the order given.
    pub objects: Vec<DeleteEntry>,
    /// Whether only errors are reported.
    pub quiet: bool,
}

/// One part a CompleteMultipartUpload lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    /// Its number, 1..=10,000.
    pub number: u32,
    /// The etag UploadPart answered.
    pub etag: String,
    /// Checksums the client sends with it (`ChecksumCRC32` and the like),
    /// element name → value.
    pub checksums: Vec<(String, String)>,
}

/// An element's name and its text, as the parsers see the document.
#[derive(Debug)]
enum Node {
    Open(String),
    Text(String),
    Close,
}

fn malformed(why: impl Into<String>) -> S3Error {
    S3Error::new(
        Code::MalformedXML,
        format!(
            "The XML you provided was not well-formed or did not validate against our published schema: {}",
            why.into()
        ),
    )
}

/// The document's elements and leaf texts in order, refusing what no S3
/// request body holds.
fn nodes(body: &[u8]) -> Result<Vec<Node>, S3Error> {
    if body.len() > MAX_BODY_BYTES {
        return Err(malformed(format!(
            "the body is over {MAX_BODY_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(body).map_err(|_| malformed("the body is not UTF-8"))?;
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut roots = 0usize;
    for token in Tokenizer::from(text) {
        let token = token.map_err(|e| malformed(e.to_string()))?;
        match token {
            Token::Declaration { .. } | Token::Comment { .. } => {}
            Token::ProcessingInstruction { .. } => {}
            Token::DtdStart { .. } | Token::EmptyDtd { .. } | Token::EntityDeclaration { .. } => {
                return Err(malformed("a document type declaration is not accepted"));
            }
            Token::DtdEnd { .. } => return Err(malformed("a DTD is not accepted")),
            Token::ElementStart { local, .. } => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(malformed("elements are nested too deep"));
                }
                if depth == 1 {
                    roots += 1;
                    if roots > 1 {
                        return Err(malformed("more than one root element"));
                    }
                }
                out.push(Node::Open(local.as_str().to_owned()));
            }
            // Attributes carry nothing S3 reads (the root's xmlns).
            Token::Attribute { .. } => {}
            Token::ElementEnd { end, .. } => match end {
                ElementEnd::Open => {}
                ElementEnd::Close(..) | ElementEnd::Empty => {
                    depth = depth.saturating_sub(1);
                    out.push(Node::Close);
                }
            },
            Token::Text { text } => {
                let raw = text.as_str();
                if raw.trim().is_empty() {
                    continue;
                }
                if depth == 0 {
                    return Err(malformed("text outside the root element"));
                }
                out.push(Node::Text(unescape(raw)?.into_owned()));
            }
            Token::Cdata { text, .. } => {
                if depth == 0 {
                    return Err(malformed("text outside the root element"));
                }
                out.push(Node::Text(text.as_str().to_owned()));
            }
        }
    }
    if roots != 1 || depth != 0 {
        return Err(malformed("the document is not one complete element"));
    }
    Ok(out)
}

/// Decodes the predefined entities and character references of `raw`.
fn unescape(raw: &str) -> Result<Cow<'_, str>, S3Error> {
    if !raw.contains('&') {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after
            .find(';')
            .ok_or_else(|| malformed("an unterminated entity reference"))?;
        let name = &after[..end];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| malformed(format!("an unknown entity `&{name};`")))?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// A cursor over the nodes, for the two documents' fixed shapes.
struct Reader {
    nodes: std::vec::IntoIter<Node>,
}

impl Reader {
    /// The next node.
    fn next(&mut self) -> Result<Node, S3Error> {
        self.nodes
            .next()
            .ok_or_else(|| malformed("the document ends early"))
    }

    /// The root element, which must be `name`.
    fn root(&mut self, name: &str) -> Result<(), S3Error> {
        match self.next()? {
            Node::Open(found) if found == name => Ok(()),
            Node::Open(found) => Err(malformed(format!("the root is <{found}>, not <{name}>"))),
            _ => Err(malformed("no root element")),
        }
    }

    /// A leaf's text, after its `Open` was read (empty for `<a/>`).
    fn leaf(&mut self) -> Result<String, S3Error> {
        match self.next()? {
            Node::Close => Ok(String::new()),
            Node::Text(text) => match self.next()? {
                Node::Close => Ok(text),
                _ => Err(malformed("a leaf holds more than text")),
            },
            Node::Open(name) => Err(malformed(format!("an unexpected <{name}>"))),
        }
    }
}

/// Parses a DeleteObjects body: `<Delete><Quiet>…</Quiet><Object><Key>…
/// </Key><VersionId>…</VersionId></Object>…</Delete>`.
///
/// # Errors
/// `MalformedXML` for anything else, for no keys, an empty key, or more
/// than [`MAX_DELETE_KEYS`].
pub fn parse_delete(body: &[u8]) -> Result<Delete, S3Error> {
    let mut r = Reader {
        nodes: nodes(body)?.into_iter(),
    };
    r.root("Delete")?;
    let mut delete = Delete {
        objects: Vec::new(),
        quiet: false,
    };
    loop {
        match r.next()? {
            Node::Close => break,
            Node::Open(name) if name == "Quiet" => {
                delete.quiet = match r.leaf()?.trim() {
                    "true" => true,
                    "false" => false,
                    other => return Err(malformed(format!("<Quiet> is `{other}`"))),
                };
            }
            Node::Open(name) if name == "Object" => {
                if delete.objects.len() == MAX_DELETE_KEYS {
                    return Err(malformed(format!(
                        "more than {MAX_DELETE_KEYS} keys in one request"
                    )));
                }
                let mut key = None;
                let mut version_id = None;
                loop {
                    match r.next()? {
                        Node::Close => break,
                        Node::Open(name) if name == "Key" => key = Some(r.leaf()?),
                        Node::Open(name) if name == "VersionId" => {
                            version_id = Some(r.leaf()?).filter(|v| !v.is_empty());
                        }
                        // Conditional deletes of single objects in a batch
                        // are not read: refusing is safer than ignoring.
                        Node::Open(name) => {
                            return Err(malformed(format!("<Object> holds <{name}>")));
                        }
                        Node::Text(_) => return Err(malformed("text in <Object>")),
                    }
                }
                let key = key
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| malformed("an <Object> without a <Key>"))?;
                delete.objects.push(DeleteEntry { key, version_id });
            }
            Node::Open(name) => return Err(malformed(format!("<Delete> holds <{name}>"))),
            Node::Text(_) => return Err(malformed("text in <Delete>")),
        }
    }
    if delete.objects.is_empty() {
        return Err(malformed("no <Object> to delete"));
    }
    Ok(delete)
}

/// Parses a CompleteMultipartUpload body: `<CompleteMultipartUpload><Part>
/// <PartNumber>…</PartNumber><ETag>…</ETag>[<ChecksumCRC32>…]</Part>…
/// </CompleteMultipartUpload>`, parts in the order given (the caller
/// checks that order: S3 answers `InvalidPartOrder` for it, not
/// `MalformedXML`).
///
/// # Errors
/// `MalformedXML` for anything else, for no parts, a part number that is
/// not a number, or more than [`MAX_PARTS`] parts.
pub fn parse_complete(body: &[u8]) -> Result<Vec<CompletedPart>, S3Error> {
    let mut r = Reader {
        nodes: nodes(body)?.into_iter(),
    };
    r.root("CompleteMultipartUpload")?;
    let mut parts = Vec::new();
    loop {
        match r.next()? {
            Node::Close => break,
            Node::Open(name) if name == "Part" => {
                if parts.len() == MAX_PARTS {
                    return Err(malformed(format!("more than {MAX_PARTS} parts")));
                }
                let mut number = None;
                let mut etag = None;
                let mut checksums = Vec::new();
                loop {
                    match r.next()? {
                        Node::Close => break,
                        Node::Open(name) if name == "PartNumber" => {
                            let text = r.leaf()?;
                            let n = text
                                .trim()
                                .parse::<u32>()
                                .map_err(|_| malformed(format!("<PartNumber> is `{text}`")))?;
                            number = Some(n);
                        }
                        Node::Open(name) if name == "ETag" => etag = Some(r.leaf()?),
                        Node::Open(name) if name.starts_with("Checksum") => {
                            let value = r.leaf()?;
                            checksums.push((name, value));
                        }
                        Node::Open(name) => {
                            return Err(malformed(format!("<Part> holds <{name}>")));
                        }
                        Node::Text(_) => return Err(malformed("text in <Part>")),
                    }
                }
                let number = number.ok_or_else(|| malformed("a <Part> without <PartNumber>"))?;
                let etag = etag.ok_or_else(|| malformed("a <Part> without <ETag>"))?;
                parts.push(CompletedPart {
                    number,
                    etag,
                    checksums,
                });
            }
            Node::Open(name) => {
                return Err(malformed(format!(
                    "<CompleteMultipartUpload> holds <{name}>"
                )));
            }
            Node::Text(_) => return Err(malformed("text in <CompleteMultipartUpload>")),
        }
    }
    if parts.is_empty() {
        return Err(malformed("no <Part> to complete"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_document_escapes_text_and_declares_the_namespace_on_its_root() {
        let mut w = Writer::document();
        w.open_root("ListBucketResult");
        w.text_element("Key", "a<b>&\"c'\u{1}");
        w.optional("Prefix", None);
        w.close("ListBucketResult");
        assert_eq!(
            w.finish(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
             xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Key>a&lt;b&gt;&amp;&quot;c&apos;&#x1;\
             </Key></ListBucketResult>"
        );
    }

    #[test]
    fn an_error_document_names_its_code_message_resource_and_request() {
        let e = S3Error::new(Code::NoSuchKey, "no such key <a&b>").on("bucket/a&b");
        assert_eq!(e.status(), 404);
        assert_eq!(
            error_document(&e, "r1"),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
             <Message>no such key &lt;a&amp;b&gt;</Message><Resource>bucket/a&amp;b</Resource>\
             <RequestId>r1</RequestId></Error>"
        );
    }

    #[test]
    fn a_delete_body_as_boto3_sends_it_parses_with_versions_and_quiet() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a/b&amp;c</Key></Object><Object><Key>d</Key><VersionId>v1</VersionId></Object><Quiet>true</Quiet></Delete>"#;
        let d = parse_delete(body).unwrap();
        assert!(d.quiet);
        assert_eq!(
            d.objects,
            vec![
                DeleteEntry {
                    key: "a/b&c".into(),
                    version_id: None
                },
                DeleteEntry {
                    key: "d".into(),
                    version_id: Some("v1".into())
                },
            ]
        );
    }

    #[test]
    fn a_complete_body_keeps_its_parts_in_the_order_given_with_their_checksums() {
        let body = br#"<CompleteMultipartUpload><Part><ETag>"e2"</ETag><PartNumber>2</PartNumber><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part><Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part></CompleteMultipartUpload>"#;
        let parts = parse_complete(body).unwrap();
        assert_eq!(parts[0].number, 2);
        assert_eq!(parts[0].etag, "\"e2\"");
        assert_eq!(
            parts[0].checksums,
            vec![("ChecksumCRC32".to_owned(), "AAAAAA==".to_owned())]
        );
        assert_eq!(parts[1].etag, "\"e1\"");
    }

    #[test]
    fn malformed_documents_are_malformed_xml_never_a_panic() {
        let bad: [&[u8]; 12] = [
            b"",
            b"<Delete>",
            b"<Delete></Delete>",
            b"<Other><Object><Key>a</Key></Object></Other>",
            b"<Delete><Object><Key>a</Key></Object></Delete><Delete/>",
            b"<!DOCTYPE d [<!ENTITY x \"y\">]><Delete><Object><Key>&x;</Key></Object></Delete>",
            b"<Delete><Object><Key>&bogus;</Key></Object></Delete>",
            b"<Delete><Object><VersionId>v</VersionId></Object></Delete>",
            b"<Delete><Object><Key>a<b/></Key></Object></Delete>",
            b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber><ETag>e</ETag></Part></CompleteMultipartUpload>",
            b"<CompleteMultipartUpload><Part><ETag>e</ETag></Part></CompleteMultipartUpload>",
            b"\xff\xfe<Delete/>",
        ];
        for body in bad {
            let d = parse_delete(body).err();
            let c = parse_complete(body).err();
            for e in [d, c].into_iter().flatten() {
                assert_eq!(e.code, Code::MalformedXML, "{body:?}");
            }
            assert!(
                parse_delete(body).is_err() && parse_complete(body).is_err(),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_delete_of_more_than_a_thousand_keys_is_refused() {
        let mut body = String::from("<Delete>");
        for i in 0..=MAX_DELETE_KEYS {
            body.push_str(&format!("<Object><Key>k{i}</Key></Object>"));
        }
        body.push_str("</Delete>");
        assert_eq!(
            parse_delete(body.as_bytes()).unwrap_err().code,
            Code::MalformedXML
        );
    }

    #[test]
    fn arbitrary_bodies_never_panic_the_parsers() {
        bolero::check!().for_each(|body: &[u8]| {
            let _ = parse_delete(body);
            let _ = parse_complete(body);
        });
    }
}
