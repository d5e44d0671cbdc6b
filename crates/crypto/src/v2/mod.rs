//! Sealed result, format v2: framed, streaming AES-256-GCM with a per-object data key.
//!
//! The byte layout, key schedule and checks are specified in the crate docs
//! ("Format v2"). This module holds the shared constants and the header codec;
//! [`Sealer`]/[`SealWriter`] produce streams, [`Opener`]/[`OpenReader`] consume them.
//! All four work in memory bounded by the frame size, whatever the stream length.

mod io;
mod open;
mod seal;

pub use io::{OpenReader, SealWriter};
pub use open::{OpenSummary, Opener};
pub use seal::{SealSummary, Sealer};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest;
use zeroize::Zeroizing;

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{
    DerivedKeys, KeyPurpose, MAX_KEY_VERSION_LEN, hkdf_sha256, validate_key_version,
};

/// The four magic bytes `FTSR` that start every v2 object.
pub const MAGIC: [u8; 4] = *b"FTSR";
/// Format version byte (offset 4).
pub const FORMAT_VERSION: u8 = 2;
/// Suite id byte (offset 5): HKDF-SHA256 data key + commitment, AES-256-GCM frames,
/// HMAC-SHA256 trailer.
pub const SUITE_AES256GCM_HKDF_SHA256: u8 = 1;
/// Plaintext bytes per regular frame written by default (64 KiB).
pub const DEFAULT_FRAME_SIZE: u32 = 64 * 1024;
/// Largest frame size a reader accepts (bounds reader memory).
pub const MAX_FRAME_SIZE: u32 = 1024 * 1024;
/// Largest job id, in bytes.
pub const MAX_JOB_ID_LEN: usize = 255;
/// Largest number of frames in one object (2^32). At 64 KiB that is 256 TiB.
pub const MAX_FRAMES: u64 = 1 << 32;
/// Bytes of the random salt in the header.
pub const SALT_LEN: usize = 32;
/// Bytes of the key commitment in the header.
pub const COMMITMENT_LEN: usize = 32;
/// Bytes of a frame's prefix (flag + length).
pub const FRAME_PREFIX_LEN: usize = 5;
/// Bytes of a GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes of the trailer (raw HMAC-SHA256).
pub const TRAILER_LEN: usize = 32;
/// Flag byte of a regular frame.
pub const FLAG_REGULAR: u8 = 0x00;
/// Flag byte of the final frame.
pub const FLAG_FINAL: u8 = 0x01;
/// HKDF info prefix of the per-object key derivation.
pub const DATA_KEY_INFO: &[u8] = b"fetcher-result-v2";

/// Whether `prefix` (≥ 5 bytes) starts a v2 object. A v1 object is Base64 text and can
/// never have the byte 0x02 at offset 4, so the two formats are told apart reliably.
pub fn is_v2(prefix: &[u8]) -> bool {
    prefix.len() >= 5 && prefix[..4] == MAGIC && prefix[4] == FORMAT_VERSION
}

/// Fixed part of the header before the key version.
const FIXED_LEN: usize = 11;

/// Decoded header, and the per-object keys it leads to.
pub(crate) struct ObjectKeys {
    pub(crate) cipher: LessSafeKey,
    pub(crate) header_hash: [u8; 32],
    pub(crate) frame_size: u32,
}

/// Serialises the header up to and including the salt.
pub(crate) fn header_prefix(
    frame_size: u32,
    key_version: &str,
    job_id: &str,
    salt: &[u8; SALT_LEN],
) -> Vec<u8> {
    let mut h = Vec::with_capacity(
        FIXED_LEN + key_version.len() + 1 + job_id.len() + SALT_LEN + COMMITMENT_LEN,
    );
    h.extend_from_slice(&MAGIC);
    h.push(FORMAT_VERSION);
    h.push(SUITE_AES256GCM_HKDF_SHA256);
    h.extend_from_slice(&frame_size.to_be_bytes());
    h.push(key_version.len() as u8);
    h.extend_from_slice(key_version.as_bytes());
    h.push(job_id.len() as u8);
    h.extend_from_slice(job_id.as_bytes());
    h.extend_from_slice(salt);
    h
}

pub(crate) fn check_job_id(job_id: &str) -> Result<()> {
    if job_id.is_empty() || job_id.len() > MAX_JOB_ID_LEN {
        return Err(Error::new(
            ErrorKind::Malformed,
            "job id must be 1-255 bytes",
        ));
    }
    Ok(())
}

pub(crate) fn check_frame_size(frame_size: u32) -> Result<()> {
    if frame_size == 0 || frame_size > MAX_FRAME_SIZE {
        return Err(Error::malformed("frame size out of range"));
    }
    Ok(())
}

/// Derives data key and commitment from the storage key and the header prefix.
pub(crate) fn object_keys(
    keys: &DerivedKeys,
    prefix: &[u8],
    salt: &[u8],
    frame_size: u32,
) -> Result<(ObjectKeys, Zeroizing<[u8; 32]>)> {
    let header_hash: [u8; 32] = digest::digest(&digest::SHA256, prefix)
        .as_ref()
        .try_into()
        .map_err(|_| Error::internal("digest failed"))?;
    let mut okm = Zeroizing::new([0u8; 64]);
    hkdf_sha256(
        salt,
        keys.key(KeyPurpose::Storage).expose_secret(),
        &[DATA_KEY_INFO, &header_hash],
        &mut okm[..],
    )?;
    let cipher = UnboundKey::new(&AES_256_GCM, &okm[..32])
        .map(LessSafeKey::new)
        .map_err(|_| Error::internal("cipher initialisation failed"))?;
    let mut commitment = Zeroizing::new([0u8; 32]);
    commitment.copy_from_slice(&okm[32..]);
    Ok((
        ObjectKeys {
            cipher,
            header_hash,
            frame_size,
        },
        commitment,
    ))
}

/// Frame nonce: four zero bytes then the sequence number, big-endian.
pub(crate) fn frame_nonce(seq: u64) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Frame AAD: header hash ‖ seq (u64 BE) ‖ flag ‖ length (u32 BE) [‖ trailer if final].
pub(crate) struct FrameAad {
    bytes: [u8; 32 + 8 + 1 + 4 + TRAILER_LEN],
    len: usize,
}

impl FrameAad {
    pub(crate) fn new(
        header_hash: &[u8; 32],
        seq: u64,
        flag: u8,
        len: u32,
        trailer: Option<&[u8; TRAILER_LEN]>,
    ) -> Self {
        let mut bytes = [0u8; 32 + 8 + 1 + 4 + TRAILER_LEN];
        bytes[..32].copy_from_slice(header_hash);
        bytes[32..40].copy_from_slice(&seq.to_be_bytes());
        bytes[40] = flag;
        bytes[41..45].copy_from_slice(&len.to_be_bytes());
        let len = match trailer {
            Some(t) => {
                bytes[45..].copy_from_slice(t);
                bytes.len()
            }
            None => 45,
        };
        FrameAad { bytes, len }
    }

    pub(crate) fn aad(&self) -> Aad<&[u8]> {
        Aad::from(&self.bytes[..self.len])
    }
}

/// Parsed header fields (before key lookup).
pub(crate) struct ParsedHeader<'a> {
    pub(crate) frame_size: u32,
    pub(crate) key_version: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) salt: &'a [u8],
    pub(crate) prefix_len: usize,
    pub(crate) commitment: &'a [u8],
}

/// Given the bytes received so far, returns the total header length if it can be known
/// yet (`Ok(None)` = need more bytes), failing fast on bad magic, version, suite, frame
/// size or field lengths.
pub(crate) fn header_len(buf: &[u8]) -> Result<Option<usize>> {
    let magic_len = buf.len().min(4);
    if buf[..magic_len] != MAGIC[..magic_len] {
        return Err(Error::malformed("not a v2 sealed result (bad magic)"));
    }
    if buf.len() > 4 && buf[4] != FORMAT_VERSION {
        return Err(Error::malformed("unsupported sealed result version"));
    }
    if buf.len() > 5 && buf[5] != SUITE_AES256GCM_HKDF_SHA256 {
        return Err(Error::malformed("unsupported sealed result suite"));
    }
    if buf.len() < FIXED_LEN {
        return Ok(None);
    }
    check_frame_size(u32::from_be_bytes([buf[6], buf[7], buf[8], buf[9]]))?;
    let v = buf[10] as usize;
    if v == 0 || v > MAX_KEY_VERSION_LEN {
        return Err(Error::malformed("bad key version length in header"));
    }
    if buf.len() < FIXED_LEN + v + 1 {
        return Ok(None);
    }
    let j = buf[FIXED_LEN + v] as usize;
    if j == 0 {
        return Err(Error::malformed("bad job id length in header"));
    }
    Ok(Some(FIXED_LEN + v + 1 + j + SALT_LEN + COMMITMENT_LEN))
}

/// Parses a complete header (length from [`header_len`]).
pub(crate) fn parse_header(buf: &[u8]) -> Result<ParsedHeader<'_>> {
    let frame_size = u32::from_be_bytes([buf[6], buf[7], buf[8], buf[9]]);
    let v = buf[10] as usize;
    let key_version = std::str::from_utf8(&buf[FIXED_LEN..FIXED_LEN + v])
        .map_err(|_| Error::malformed("bad key version in header"))?;
    validate_key_version(key_version).map_err(|_| Error::malformed("bad key version in header"))?;
    let j_at = FIXED_LEN + v;
    let j = buf[j_at] as usize;
    let job_id = std::str::from_utf8(&buf[j_at + 1..j_at + 1 + j])
        .map_err(|_| Error::malformed("bad job id in header"))?;
    let salt_at = j_at + 1 + j;
    let prefix_len = salt_at + SALT_LEN;
    Ok(ParsedHeader {
        frame_size,
        key_version,
        job_id,
        salt: &buf[salt_at..prefix_len],
        prefix_len,
        commitment: &buf[prefix_len..prefix_len + COMMITMENT_LEN],
    })
}

#[cfg(test)]
mod tests;
