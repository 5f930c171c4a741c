//! Checksummed values: every value the embedded store writes carries a CRC-32C of its key and
//! contents, and every read checks it.
//!
//! Three base64 characters changed inside the store file were once served back as valid data:
//! redb checks its pages only when it repairs a file, not on every read. A checksum over the
//! key *and* the value also catches a value that ended up under another key. A mismatch is a
//! [`Corrupt`] naming what is damaged (aggregate and version for a batch); it is never served,
//! and never trusted by a write (a corrupt version or sequence would let a write overwrite a
//! batch or skip a duplicate check).
//!
//! A batch is stored as `[TAG][crc32c LE: 4 bytes][JSON]`, the JSON exactly what a read
//! answers, so a read serves it without parsing. A number is stored as `(value, crc32c)`.

use super::tables::{AggKey, BatchKey, Sealed, describe};

/// First byte of a checksummed batch record (schema 2). Schema 1 records are bare JSON and
/// start with `{`.
pub const TAG: u8 = 0xC5;

/// Bytes before a record's JSON.
pub const HEADER: usize = 5;

/// Damaged stored data: what it is, for messages and logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} fails its checksum")]
pub struct Corrupt(pub String);

fn key_bytes(parts: &[u128], tail: Option<u64>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(parts.len() * 16 + 8);
    for part in parts {
        bytes.extend_from_slice(&part.to_le_bytes());
    }
    if let Some(tail) = tail {
        bytes.extend_from_slice(&tail.to_le_bytes());
    }
    bytes
}

fn batch_crc(key: BatchKey, json: &[u8]) -> u32 {
    let (o, t, i, v) = key;
    crc32c::crc32c_append(crc32c::crc32c(&key_bytes(&[o, t, i], Some(v))), json)
}

/// "batch V of aggregate T/I (org O)".
pub fn describe_batch(key: BatchKey) -> String {
    let (o, t, i, v) = key;
    format!("batch {v} of {}", describe((o, t, i)))
}

/// The record of batch `key` holding `json`.
pub fn seal_batch(key: BatchKey, json: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER + json.len());
    record.push(TAG);
    record.extend_from_slice(&batch_crc(key, json).to_le_bytes());
    record.extend_from_slice(json);
    record
}

/// The JSON of batch `key`'s record, checked.
pub fn open_batch(key: BatchKey, record: &[u8]) -> Result<&[u8], Corrupt> {
    let corrupt = || Corrupt(describe_batch(key));
    if record.len() < HEADER || record[0] != TAG {
        return Err(corrupt());
    }
    let stored = u32::from_le_bytes([record[1], record[2], record[3], record[4]]);
    let json = &record[HEADER..];
    if batch_crc(key, json) != stored {
        return Err(corrupt());
    }
    Ok(json)
}

fn number_crc(table: &str, key: &[u8], value: u64) -> u32 {
    let crc = crc32c::crc32c_append(crc32c::crc32c(table.as_bytes()), key);
    crc32c::crc32c_append(crc, &value.to_le_bytes())
}

/// A number of `table` under `key` (its parts), with its checksum.
pub fn seal_number(table: &str, key: &[u128], value: u64) -> Sealed {
    (value, number_crc(table, &key_bytes(key, None), value))
}

/// A sealed number, checked; `what` names it in the error.
pub fn open_number(
    table: &str,
    key: &[u128],
    sealed: Sealed,
    what: impl FnOnce() -> String,
) -> Result<u64, Corrupt> {
    let (value, stored) = sealed;
    if number_crc(table, &key_bytes(key, None), value) == stored {
        Ok(value)
    } else {
        Err(Corrupt(what()))
    }
}

/// The version of an aggregate, sealed.
pub fn seal_version(key: AggKey, version: u64) -> Sealed {
    let (o, t, i) = key;
    seal_number("aggregates", &[o, t, i], version)
}

/// The version of an aggregate, checked.
pub fn open_version(key: AggKey, sealed: Sealed) -> Result<u64, Corrupt> {
    let (o, t, i) = key;
    open_number("aggregates", &[o, t, i], sealed, || {
        format!("the version of {}", describe(key))
    })
}

/// The lowest available version of a trimmed aggregate, sealed.
pub fn seal_trim(key: AggKey, min_version: u64) -> Sealed {
    let (o, t, i) = key;
    seal_number("trims", &[o, t, i], min_version)
}

/// The lowest available version of a trimmed aggregate, checked.
pub fn open_trim(key: AggKey, sealed: Sealed) -> Result<u64, Corrupt> {
    let (o, t, i) = key;
    open_number("trims", &[o, t, i], sealed, || {
        format!("the trim mark of {}", describe(key))
    })
}

/// The writing client of a batch's JSON, read without trusting (or parsing) the rest of it.
pub fn writer_of(json: &[u8]) -> Option<u128> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Writer {
        client_id: uuid::Uuid,
    }
    serde_json::from_slice::<Writer>(json)
        .ok()
        .map(|w| w.client_id.as_u128())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_opens_under_its_own_key_only() {
        let key = (1, 2, 3, 4);
        let record = seal_batch(key, br#"{"version":4}"#);
        assert_eq!(open_batch(key, &record).unwrap(), br#"{"version":4}"#);
        let moved = open_batch((1, 2, 3, 5), &record).unwrap_err();
        assert_eq!(
            moved.to_string(),
            "batch 5 of aggregate 00000000-0000-0000-0000-000000000002/\
             00000000-0000-0000-0000-000000000003 (org 00000000-0000-0000-0000-000000000001) \
             fails its checksum"
        );
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let key = (9, 8, 7, 1);
        let record = seal_batch(key, b"{\"data\":\"AQID\"}");
        for byte in 0..record.len() {
            for bit in 0..8 {
                let mut bad = record.clone();
                bad[byte] ^= 1 << bit;
                assert!(open_batch(key, &bad).is_err(), "byte {byte} bit {bit}");
            }
        }
        assert!(open_batch(key, &record[..3]).is_err(), "truncated");
        assert!(open_batch(key, b"{\"schema 1\":true}").is_err(), "untagged");
    }

    #[test]
    fn numbers_are_bound_to_their_table_key_and_value() {
        let sealed = seal_version((1, 2, 3), 42);
        assert_eq!(open_version((1, 2, 3), sealed), Ok(42));
        assert!(open_version((1, 2, 4), sealed).is_err());
        assert!(open_version((1, 2, 3), (43, sealed.1)).is_err());
        let other_table = seal_number("client_usage", &[1, 2, 3], 42);
        assert!(open_version((1, 2, 3), other_table).is_err());
    }
}
