//! Multipart uploads: CreateMultipartUpload, UploadPart, UploadPartCopy,
//! CompleteMultipartUpload, AbortMultipartUpload, ListParts and
//! ListMultipartUploads, over the stores' own multipart primitives.
//!
//! - A part's body is read and checked like a PutObject's (every claim,
//!   within the per-object limit and the body budget), so one part is
//!   held at a time per connection, never the object.
//! - A part's etag is its CRC-64/NVME and length (`"<crc><len>"`, 32 hex
//!   digits): Complete folds the parts' CRCs from the etags the client
//!   lists, and the store refuses to publish unless the parts it holds
//!   have that CRC, so a listing that names other bytes than were
//!   uploaded publishes nothing (`InvalidPart`).
//! - Parts are numbered 1..=N without gaps: S3 allows gaps, the stores'
//!   assembly does not (every SDK numbers parts from 1 without gaps).
//!   Parts listed out of order are `InvalidPartOrder`.
//! - ListParts pages the parts the store holds (`max-parts` up to 1000,
//!   `part-number-marker`), each with the etag its upload answered, so a
//!   client resuming an upload completes it from the listing.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use custodian_base::checksum;
use custodian_object::{CompleteOptions, HeadOptions, PartData, UploadOptions};
use custodian_s3_wire::date;
use custodian_s3_wire::error::{Code, S3Error};
use custodian_s3_wire::xml::{self, Writer};

use super::objects::{
    copy_source, judge_copy, object_key_of, refuse_withheld, user_metadata, value, write_condition,
};
use super::{Call, body, errors, etag, xml as xml_response};

/// Highest part number (S3's).
const MAX_PART_NUMBER: u32 = 10_000;

/// The etag of a part of `len` bytes with CRC-64/NVME `crc`.
fn part_etag(crc: u64, len: u64) -> String {
    format!("\"{crc:016x}{len:016x}\"")
}

/// The CRC and length a part's etag names.
fn of_part_etag(etag: &str) -> Option<(u64, u64)> {
    let inner = etag.trim().trim_matches('"');
    if inner.len() != 32 || !inner.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let crc = u64::from_str_radix(&inner[..16], 16).ok()?;
    let len = u64::from_str_radix(&inner[16..], 16).ok()?;
    Some((crc, len))
}

fn upload_id(call: &Call) -> Result<&str, S3Error> {
    call.addressed
        .param("uploadId")
        .filter(|id| !id.is_empty())
        .ok_or_else(|| S3Error::new(Code::InvalidArgument, "uploadId is missing"))
}

fn part_number(call: &Call) -> Result<u32, S3Error> {
    call.addressed
        .param("partNumber")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=MAX_PART_NUMBER).contains(n))
        .ok_or_else(|| {
            S3Error::new(
                Code::InvalidArgument,
                format!(
                    "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
                ),
            )
        })
}

/// CreateMultipartUpload: the object's metadata is fixed here, as in S3.
pub(super) async fn create(call: &Call) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?;
    let object = object_key_of(key)?;
    let metadata = user_metadata(call)?;
    refuse_withheld(call, &store_name, key).await?;
    let id = store
        .create_upload(
            &object,
            UploadOptions {
                metadata: &metadata,
            },
        )
        .await
        .map_err(|e| errors::of_store(e, false))?;
    let mut w = Writer::document();
    w.open_root("InitiateMultipartUploadResult");
    w.text_element("Bucket", &store_name);
    w.text_element("Key", key);
    w.text_element("UploadId", &id);
    w.close("InitiateMultipartUploadResult");
    let mut response = xml_response(StatusCode::OK, w.finish());
    // The checksum the client will send with each part is checked part by
    // part; the answer names it back, as S3 does.
    if let Some(algorithm) = call.header("x-amz-checksum-algorithm")? {
        response
            .headers_mut()
            .insert("x-amz-checksum-algorithm", value(algorithm)?);
    }
    Ok(response)
}

/// UploadPart.
pub(super) async fn upload_part(call: &Call, body: Body) -> Result<Response, S3Error> {
    let (_, store) = call.store()?;
    let object = object_key_of(call.key()?)?;
    let id = upload_id(call)?.to_owned();
    let number = part_number(call)?;
    let limit = call.host.limits.max_object_bytes;
    let (crc, len, claims) = if body::should_stream(call, store.as_ref())? {
        let incoming = body::Incoming::new(call, body, limit, false)?;
        let (finished, crc) = body::stream_into(incoming, |streamed| {
            store.upload_part_stream(&object, &id, number, streamed, limit)
        })
        .await?;
        (crc, finished.len, finished.claims)
    } else {
        let received = body::read(call, body, limit, false).await?;
        let data = PartData::Bytes {
            body: received.bytes.clone(),
            crc64: received.crc64,
        };
        let crc = store
            .upload_part(&object, &id, number, data)
            .await
            .map_err(|e| errors::of_store(e, false))?;
        (crc, received.bytes.len() as u64, received.claims)
    };
    let mut headers = HeaderMap::new();
    headers.insert("etag", value(&part_etag(crc, len))?);
    for claim in &claims {
        headers.insert(claim.algorithm.header(), value(&claim.value)?);
    }
    Ok((StatusCode::OK, headers).into_response())
}

/// UploadPartCopy: a range (or all) of the source's current version,
/// asked about as a read of the source and a write of the destination.
pub(super) async fn upload_part_copy(call: &Call) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?.to_owned();
    let object = object_key_of(&key)?;
    let id = upload_id(call)?.to_owned();
    let number = part_number(call)?;
    let (source_bucket, source_key, source_version) = copy_source(call)?;
    if source_bucket != store_name || source_version.is_some() {
        return Err(S3Error::new(
            Code::NotImplemented,
            "UploadPartCopy copies from the current version of an object of the same bucket",
        ));
    }
    let source = object_key_of(&source_key)?;
    judge_copy(call, (&store_name, &source_key, None), (&store_name, &key)).await?;
    let meta = store
        .head_opts(&source, HeadOptions::default())
        .await
        .map_err(|e| errors::of_store(e, false))?;
    if let Some(want) = call.header("x-amz-copy-source-if-match")?
        && want.trim_matches('"') != etag::of_meta(&meta).trim_matches('"')
    {
        return Err(S3Error::new(
            Code::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold (copy source)",
        ));
    }
    let range = match call.header("x-amz-copy-source-range")? {
        None => 0..meta.size,
        Some(text) => {
            let parsed = text
                .strip_prefix("bytes=")
                .and_then(|r| r.split_once('-'))
                .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
            match parsed {
                Some((first, last)) if first <= last && last < meta.size => first..last + 1,
                _ => {
                    return Err(S3Error::new(
                        Code::InvalidRange,
                        format!(
                            "x-amz-copy-source-range {text:?} is not bytes=first-last within the \
                             source's {} bytes",
                            meta.size
                        ),
                    ));
                }
            }
        }
    };
    let len = range.end - range.start;
    let crc = store
        .upload_part(
            &object,
            &id,
            number,
            PartData::Copy {
                source: &source,
                source_if_match: &meta.etag,
                range,
            },
        )
        .await
        .map_err(|e| errors::of_store(e, false))?;
    let mut w = Writer::document();
    w.open_root("CopyPartResult");
    w.text_element("ETag", &part_etag(crc, len));
    w.text_element("LastModified", &date::timestamp(call.host.clock.now_ms()));
    w.close("CopyPartResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// CompleteMultipartUpload, with `If-None-Match: *` or `If-Match`.
pub(super) async fn complete(call: &Call, body: Body) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?.to_owned();
    let object = object_key_of(&key)?;
    let id = upload_id(call)?.to_owned();
    let condition = write_condition(call, store.as_ref(), &object).await?;
    refuse_withheld(call, &store_name, &key).await?;
    let received = body::read(call, body, xml::MAX_BODY_BYTES as u64, false).await?;
    let parts = xml::parse_complete(&received.bytes)?;
    drop(received);
    if parts
        .windows(2)
        .any(|pair| pair[1].number <= pair[0].number)
    {
        return Err(S3Error::new(
            Code::InvalidPartOrder,
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        ));
    }
    let mut crc = None;
    for (i, part) in parts.iter().enumerate() {
        let expected = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if part.number != expected {
            return Err(S3Error::new(
                Code::InvalidPart,
                format!(
                    "part {} is listed where part {expected} belongs: this endpoint assembles \
                     parts numbered 1..N without gaps",
                    part.number
                ),
            ));
        }
        let (part_crc, len) = of_part_etag(&part.etag).ok_or_else(|| {
            S3Error::new(
                Code::InvalidPart,
                format!(
                    "part {} has an etag this endpoint did not issue",
                    part.number
                ),
            )
        })?;
        crc = Some(match crc {
            None => part_crc,
            Some(so_far) => checksum::combine(so_far, part_crc, len),
        });
    }
    let crc64 = crc.ok_or_else(|| S3Error::new(Code::MalformedXML, "no part to complete"))?;
    let count = u32::try_from(parts.len()).unwrap_or(u32::MAX);
    let meta = store
        .complete_upload(
            &object,
            &id,
            CompleteOptions {
                parts: count,
                condition: &condition,
                crc64,
            },
        )
        .await
        .map_err(|e| match e {
            custodian_object::ObjectError::ChecksumMismatch(_) => S3Error::new(
                Code::InvalidPart,
                "One or more of the specified parts could not be found or its etag did not \
                 match the part uploaded; nothing was published",
            ),
            other => errors::of_store(other, false),
        })?;
    let mut w = Writer::document();
    w.open_root("CompleteMultipartUploadResult");
    w.text_element("Location", &format!("/{store_name}/{key}"));
    w.text_element("Bucket", &store_name);
    w.text_element("Key", &key);
    w.text_element("ETag", &etag::of_meta(&meta));
    w.text_element("ChecksumCRC64NVME", &checksum::to_wire(crc64));
    w.close("CompleteMultipartUploadResult");
    let mut response = xml_response(StatusCode::OK, w.finish());
    if let Some(version) = &meta.version_id {
        response
            .headers_mut()
            .insert("x-amz-version-id", value(version)?);
    }
    Ok(response)
}

/// AbortMultipartUpload.
pub(super) async fn abort(call: &Call) -> Result<Response, S3Error> {
    let (_, store) = call.store()?;
    let object = object_key_of(call.key()?)?;
    let id = upload_id(call)?;
    store
        .abort_upload(&object, id)
        .await
        .map_err(|e| errors::of_store(e, false))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// ListMultipartUploads: every pending upload under the prefix, one page.
pub(super) async fn list_uploads(call: &Call) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let prefix = call.addressed.param("prefix").unwrap_or("");
    let uploads = store
        .list_uploads(prefix)
        .await
        .map_err(|e| errors::of_store(e, false))?;
    let mut w = Writer::document();
    w.open_root("ListMultipartUploadsResult");
    w.text_element("Bucket", &store_name);
    w.text_element("KeyMarker", "");
    w.text_element("UploadIdMarker", "");
    w.text_element("Prefix", prefix);
    w.text_element("MaxUploads", "1000");
    w.text_element("IsTruncated", "false");
    for upload in &uploads {
        w.open("Upload");
        w.text_element("Key", &upload.key);
        w.text_element("UploadId", &upload.upload_id);
        w.text_element(
            "Initiated",
            &date::timestamp(upload.initiated_ms.unwrap_or(0)),
        );
        w.text_element("StorageClass", "STANDARD");
        w.close("Upload");
    }
    w.close("ListMultipartUploadsResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// ListParts.
pub(super) async fn list_parts(call: &Call) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?.to_owned();
    let object = object_key_of(&key)?;
    let id = upload_id(call)?.to_owned();
    let number = |name: &str, default: u32| -> Result<u32, S3Error> {
        call.addressed.param(name).map_or(Ok(default), |text| {
            text.parse::<u32>().map_err(|_| {
                S3Error::new(
                    Code::InvalidArgument,
                    format!("{name} is not a number: {text:?}"),
                )
            })
        })
    };
    // S3's page bound, and its default.
    let max_parts = number("max-parts", 1_000)?.min(1_000);
    let marker = number("part-number-marker", 0)?;
    let parts = store
        .list_parts(&object, &id)
        .await
        .map_err(|e| errors::of_store(e, false))?;
    let after: Vec<_> = parts.iter().filter(|p| p.number > marker).collect();
    let page = &after[..after.len().min(max_parts as usize)];
    let truncated = page.len() < after.len();
    let mut w = Writer::document();
    w.open_root("ListPartsResult");
    w.text_element("Bucket", &store_name);
    w.text_element("Key", &key);
    w.text_element("UploadId", &id);
    w.text_element("PartNumberMarker", &marker.to_string());
    if let Some(last) = page.last() {
        w.text_element("NextPartNumberMarker", &last.number.to_string());
    }
    w.text_element("MaxParts", &max_parts.to_string());
    w.text_element("IsTruncated", if truncated { "true" } else { "false" });
    w.text_element("StorageClass", "STANDARD");
    for part in page {
        // A part's etag is its CRC and length; a store that kept no CRC
        // for a part cannot name it the way Complete will ask for it.
        let crc = part.crc64.ok_or_else(|| {
            S3Error::new(
                Code::NotImplemented,
                format!(
                    "the store {store_name:?} keeps no CRC for part {} of this upload",
                    part.number
                ),
            )
        })?;
        w.open("Part");
        w.text_element("PartNumber", &part.number.to_string());
        w.text_element(
            "LastModified",
            &date::timestamp(
                part.last_modified_ms
                    .unwrap_or_else(|| call.host.clock.now_ms()),
            ),
        );
        w.text_element("ETag", &part_etag(crc, part.size));
        w.text_element("Size", &part.size.to_string());
        w.text_element("ChecksumCRC64NVME", &checksum::to_wire(crc));
        w.close("Part");
    }
    w.close("ListPartsResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_etag_names_its_crc_and_length_and_foreign_etags_name_nothing() {
        let etag = part_etag(0xAE8B_1486_0A79_9888, 9);
        assert_eq!(of_part_etag(&etag), Some((0xAE8B_1486_0A79_9888, 9)));
        assert_eq!(of_part_etag("\"d41d8cd98f00b204e9800998ecf8427e-2\""), None);
        assert_eq!(of_part_etag("\"zz\""), None);
    }
}
