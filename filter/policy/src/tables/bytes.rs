//! The tables' byte form: postcard over the types themselves, behind a four-byte tag (`u`,
//! `c`, the table's kind, the format version), so that a table written by another version of
//! upcheck sharing the `vm_id`, or bytes of another kind, are refused, never misread. The
//! fleet's values in etcd ([`crate::etcd`]) take the same form.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;

/// The format version; bump it whenever a table's types change, with the keys in
/// [`super::keys`].
pub(super) const VERSION: u8 = 7;

/// The kinds of table, each its tag's third byte.
pub(super) const ACTIVE: u8 = b'a';
pub(super) const PASSIVE: u8 = b'p';
pub(super) const ANNOUNCE: u8 = b'n';
pub(super) const LEASES: u8 = b'l';
pub(super) const HISTORY: u8 = b'h';
pub(super) const FLEET: u8 = b'b';

/// Bytes that are not a table this build can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError(pub(super) &'static str);

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
}

pub(super) fn encode<T: Serialize>(kind: u8, table: &T) -> Vec<u8> {
    tagged([b'u', b'c', kind, VERSION], table)
}

pub(super) fn decode<T: DeserializeOwned>(kind: u8, bytes: &[u8]) -> Result<T, TableError> {
    untagged([b'u', b'c', kind, VERSION], bytes)
}

/// `value` in postcard behind the four bytes of `tag` (`u`, `c`, its kind, its format version),
/// so that bytes of another kind or version are refused, never misread: the tables here, and
/// the values the fleet keeps in etcd ([`crate::etcd`]).
pub(crate) fn tagged<T: Serialize>(tag: [u8; 4], value: &T) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail; empty bytes are the safe fallback.
    postcard::to_extend(value, tag.to_vec()).unwrap_or_default()
}

/// Reads what [`tagged`] wrote behind `tag`.
pub(crate) fn untagged<T: DeserializeOwned>(tag: [u8; 4], bytes: &[u8]) -> Result<T, TableError> {
    let body = match bytes.split_first_chunk::<4>() {
        Some((found, body)) if *found == tag => body,
        Some(([b'u', b'c', kind, _], _)) if *kind == tag[2] => {
            return Err(TableError("written by another version of upcheck"))
        }
        _ => return Err(TableError("not written by upcheck")),
    };
    match postcard::take_from_bytes(body) {
        Ok((value, [])) => Ok(value),
        Ok(_) => Err(TableError("trailing bytes")),
        Err(_) => Err(TableError("truncated or corrupt")),
    }
}
