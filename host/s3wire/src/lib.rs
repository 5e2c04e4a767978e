//! The S3 wire protocol, server side, with no IO of its own: what
//! Custodian's S3 endpoint (`custodian-server`'s `serve::s3`) needs to
//! understand a request from a standard S3 client and to answer it in
//! the form that client expects.
//!
//! - [`sigv4`]: AWS Signature Version 4, by `Authorization` header or by
//!   presigned query, checked against a secret the caller looks up.
//! - [`chunked`]: `aws-chunked` request bodies (signed chunks, or unsigned
//!   ones with a trailer), decoded incrementally within a bound.
//! - [`checksum`]: the `x-amz-checksum-*` family (CRC-64/NVME, CRC-32,
//!   CRC-32C), computed as a body arrives and compared to a claim.
//! - [`xml`]: S3's XML bodies, written, and the two it reads
//!   (`Delete`, `CompleteMultipartUpload`) parsed within bounds.
//! - [`error`]: S3's error codes, with their HTTP status.
//! - [`date`]: HTTP dates both ways, and the times of S3's XML.
//!
//! Arrows point down: this crate knows no store, principal or policy;
//! the server maps its own errors onto [`error::S3Error`].

pub mod checksum;
pub mod chunked;
pub mod date;
pub mod error;
pub mod sigv4;
pub mod xml;
