//! An object's bytes wherever a whole copy is: its serving copy, or, once
//! a takedown removed that, the preserved copy of a request denying it
//! ([`crate::preserved::pick`]). A pack's inventory and a manifest's chunk
//! list are read this way, so a request filed after a serving copy was
//! removed still walks it: to seed a pack ([`crate::seed`]) and to deny a
//! pack's members or a manifest's chunks ([`crate::denial_work`]).

use custodian_sdk::contract::content::manifest as manifest_layout;
use custodian_sdk::contract::content::{ID_BYTES, pack::member_offset};
use custodian_sdk::{Error, objects};

use crate::codec::{Id, corrupt, hex};
use crate::content::{self, SERVING, manifest, pack};
use crate::preserved::{self, ReadError};

/// Bytes `[offset, offset + length)` of `object`'s serving copy, cut at
/// its end. A serving copy a takedown removed is read from the preserved
/// copy of a request denying the object instead
/// ([`crate::preserved::pick`]); a copy missing from both is data loss
/// (`Corrupt`, naming it as `what`).
pub fn read(object: &Id, offset: u64, length: u64, what: &str) -> Result<Vec<u8>, Error> {
    let key = crate::keys::serving_key(object);
    let missing = match objects::get_range(SERVING, &key, offset, length, None) {
        Ok(bytes) => return Ok(bytes),
        Err(Error::NotFound(m)) => m,
        Err(other) => return Err(other),
    };
    let Some(copy) = preserved::pick(object, None)? else {
        return Err(corrupt(format!(
            "{what} {} is missing from serving, and no request holds a verified preserved copy: {missing}",
            hex(object)
        )));
    };
    preserved::read_range(&copy.request, object, copy.info.size, offset, length).map_err(|error| {
        match error {
            ReadError::Unreadable(why) => corrupt(format!(
                "{what} {} is missing from serving: {why}",
                hex(object)
            )),
            ReadError::Host(error) => error,
        }
    })
}

/// Up to `max` inventory entries (id, kind) of `pack_id` from entry
/// `next` on, read with [`read`], with its member count: `count` when a
/// cursor knows it already, else read from the header. Shared by the
/// seed's walk and the denial's ([`crate::denial_work`]). A missing or
/// malformed pack, or a cursor past its inventory, is `Corrupt`.
pub fn pack_inventory(
    pack_id: &Id,
    next: u32,
    count: Option<u32>,
    max: u32,
) -> Result<(u32, Vec<(Id, u8)>), Error> {
    let count = match count {
        Some(count) => count,
        None => {
            let header = read(pack_id, 0, pack::HEADER, "pack")?;
            pack::count(&header)
                .map_err(|reason| corrupt(format!("pack {}: {reason}", hex(pack_id))))?
        }
    };
    if next > count {
        return Err(corrupt(format!(
            "the cursor of pack {} is past its inventory",
            hex(pack_id)
        )));
    }
    let take = max.min(count - next);
    if take == 0 {
        return Ok((count, Vec::new()));
    }
    let offset = member_offset(next);
    let length = pack::ENTRY * u64::from(take);
    let bytes = read(pack_id, offset, length, "pack")?;
    if bytes.len() as u64 != length {
        return Err(corrupt(format!(
            "pack {} is shorter than its inventory",
            hex(pack_id)
        )));
    }
    Ok((count, parse_entries(pack_id, &bytes)?))
}

fn parse_entries(pack_id: &Id, bytes: &[u8]) -> Result<Vec<(Id, u8)>, Error> {
    bytes
        .chunks_exact(pack::ENTRY as usize)
        .map(|entry| {
            let kind = entry[32];
            if !content::is_kind(kind) {
                return Err(corrupt(format!(
                    "pack {} lists a member of unknown kind {kind}",
                    hex(pack_id)
                )));
            }
            let id = Id::try_from(&entry[..32]).map_err(|_| corrupt("a pack entry"))?;
            Ok((id, kind))
        })
        .collect()
}

/// Up to `max` chunk ids of `manifest_id` from chunk `next` on, read with
/// [`read`], with its chunk count: `count` when a cursor knows it
/// already, else read from the header (magic, format and the count bound
/// checked). A missing, malformed or short manifest is `Corrupt`, naming
/// it.
pub fn manifest_chunks(
    manifest_id: &Id,
    next: u32,
    count: Option<u32>,
    max: u32,
) -> Result<(u32, Vec<Id>), Error> {
    let bad = |what: &str| corrupt(format!("manifest {}: {what}", hex(manifest_id)));
    let count = match count {
        Some(count) => count,
        None => {
            let header = read(manifest_id, 0, manifest::HEADER, "manifest")?;
            let header = <[u8; manifest_layout::HEADER_BYTES]>::try_from(header.as_slice())
                .map_err(|_| bad("shorter than a manifest header"))?;
            let header =
                manifest_layout::Header::decode(&header).map_err(|why| bad(&why.to_string()))?;
            if header.count > manifest_layout::MAX_CHUNKS {
                return Err(bad(&format!("{} chunks", header.count)));
            }
            header.count
        }
    };
    if next > count {
        return Err(bad("a cursor past its chunk list"));
    }
    let take = max.min(count - next);
    if take == 0 {
        return Ok((count, Vec::new()));
    }
    let length = u64::from(take) * ID_BYTES as u64;
    let bytes = read(
        manifest_id,
        manifest::chunk_offset(next),
        length,
        "manifest",
    )?;
    if bytes.len() as u64 != length {
        return Err(bad("shorter than its chunk list"));
    }
    Ok((
        count,
        bytes
            .chunks_exact(ID_BYTES)
            .map(|c| Id::try_from(c).expect("chunks of 32 bytes"))
            .collect(),
    ))
}
