//! Push-style v2 sealing.

use aws_lc_rs::hmac;
use zeroize::Zeroizing;

use super::{
    COMMITMENT_LEN, DEFAULT_FRAME_SIZE, FLAG_FINAL, FLAG_REGULAR, FRAME_PREFIX_LEN, FrameAad,
    MAX_FRAMES, ObjectKeys, SALT_LEN, TAG_LEN, TRAILER_LEN, check_frame_size, check_job_id,
    frame_nonce, header_prefix, object_keys,
};
use crate::encoding::hex_lower;
use crate::error::{Error, Result};
use crate::keys::{KeyPurpose, KeyRing};

/// What a finished v2 seal reports (goes into the job record / result descriptor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealSummary {
    /// Document HMAC of the whole plaintext, lowercase hex (same value v1 would give).
    pub hmac: String,
    /// Plaintext bytes sealed.
    pub plaintext_len: u64,
    /// Bytes of the sealed object (header + frames + trailer).
    pub sealed_len: u64,
    /// Frames written, final frame included.
    pub frames: u64,
    /// Key version named in the header.
    pub key_version: String,
    /// Job id named in the header.
    pub job_id: String,
}

/// Push-style sealer: feed plaintext with [`update`](Self::update) /
/// [`update_into`](Self::update_into), get sealed bytes back, then
/// [`finish`](Self::finish). Holds at most one frame of plaintext; usable from async code
/// (no `std::io`). Output must be stored in order and completely: a stream without the
/// bytes `finish` returns is rejected as truncated by readers.
pub struct Sealer {
    keys: ObjectKeys,
    hmac: hmac::Context,
    /// Header bytes not yet emitted (emitted with the first output).
    header: Option<Vec<u8>>,
    /// Plaintext of the frame being filled (< frame size bytes).
    pending: Zeroizing<Vec<u8>>,
    seq: u64,
    plaintext_len: u64,
    sealed_len: u64,
    key_version: String,
    job_id: String,
    poisoned: bool,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("key_version", &self.key_version)
            .field("job_id", &self.job_id)
            .field("frames", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer for `job_id` (1-255 bytes) under the ring's current keys, 64 KiB frames.
    pub fn new(ring: &KeyRing, job_id: &str) -> Result<Self> {
        Self::with_frame_size(ring, job_id, DEFAULT_FRAME_SIZE)
    }

    /// As [`new`](Self::new) with another frame size (1..=1 MiB). Meant for tests and
    /// tuning; readers accept any size in range.
    pub fn with_frame_size(ring: &KeyRing, job_id: &str, frame_size: u32) -> Result<Self> {
        check_job_id(job_id)?;
        check_frame_size(frame_size)?;
        let derived = ring.current();
        let mut salt = [0u8; SALT_LEN];
        aws_lc_rs::rand::fill(&mut salt).map_err(|_| Error::internal("random generator failed"))?;
        let mut header = header_prefix(frame_size, derived.version(), job_id, &salt);
        let (keys, commitment) = object_keys(derived, &header, &salt, frame_size)?;
        header.extend_from_slice(&commitment[..COMMITMENT_LEN]);
        let ext = hmac::Key::new(
            hmac::HMAC_SHA256,
            derived.key(KeyPurpose::ExternalHmac).expose_secret(),
        );
        Ok(Sealer {
            keys,
            hmac: hmac::Context::with_key(&ext),
            header: Some(header),
            pending: Zeroizing::new(Vec::with_capacity(frame_size as usize)),
            seq: 0,
            plaintext_len: 0,
            sealed_len: 0,
            key_version: derived.version().to_owned(),
            job_id: job_id.to_owned(),
            poisoned: false,
        })
    }

    /// The frame size in plaintext bytes.
    pub fn frame_size(&self) -> usize {
        self.keys.frame_size as usize
    }

    /// Seals `plaintext` and returns the sealed bytes ready so far (possibly none).
    /// The output is about as long as the input: pass bounded chunks to stay bounded.
    pub fn update(&mut self, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(plaintext.len() + 128);
        self.update_into(plaintext, &mut out)?;
        Ok(out)
    }

    /// As [`update`](Self::update), appending to `out` (no allocation when `out` has room).
    pub fn update_into(&mut self, mut plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        if self.poisoned {
            return Err(Error::internal("sealer used after an error"));
        }
        let start = out.len();
        let result = (|| {
            self.emit_header(out);
            let fs = self.frame_size();
            if !self.pending.is_empty() {
                let take = (fs - self.pending.len()).min(plaintext.len());
                self.pending.extend_from_slice(&plaintext[..take]);
                plaintext = &plaintext[take..];
                if self.pending.len() == fs {
                    let frame = std::mem::take(&mut *self.pending);
                    let r = self.seal_frame(&frame, None, out);
                    *self.pending = frame;
                    self.pending.clear();
                    r?;
                }
            }
            while plaintext.len() >= fs {
                let (frame, rest) = plaintext.split_at(fs);
                self.seal_frame(frame, None, out)?;
                plaintext = rest;
            }
            self.pending.extend_from_slice(plaintext);
            Ok(())
        })();
        if result.is_err() {
            self.poisoned = true;
            out.truncate(start);
        }
        result
    }

    /// Seals the final frame and appends the trailer; returns those bytes and the summary.
    pub fn finish(self) -> Result<(Vec<u8>, SealSummary)> {
        let mut out = Vec::with_capacity(self.pending.len() + 256);
        let summary = self.finish_into(&mut out)?;
        Ok((out, summary))
    }

    /// As [`finish`](Self::finish), appending to `out`.
    pub fn finish_into(mut self, out: &mut Vec<u8>) -> Result<SealSummary> {
        if self.poisoned {
            return Err(Error::internal("sealer used after an error"));
        }
        self.emit_header(out);
        let last = std::mem::take(&mut *self.pending);
        let last = Zeroizing::new(last);
        self.hmac.update(&last);
        let mac: [u8; TRAILER_LEN] = self
            .hmac
            .clone()
            .sign()
            .as_ref()
            .try_into()
            .map_err(|_| Error::internal("hmac failed"))?;
        self.plaintext_len += last.len() as u64;
        self.seal_raw(&last, FLAG_FINAL, Some(&mac), out)?;
        out.extend_from_slice(&mac);
        self.sealed_len += TRAILER_LEN as u64;
        Ok(SealSummary {
            hmac: hex_lower(&mac),
            plaintext_len: self.plaintext_len,
            sealed_len: self.sealed_len,
            frames: self.seq,
            key_version: self.key_version,
            job_id: self.job_id,
        })
    }

    fn emit_header(&mut self, out: &mut Vec<u8>) {
        if let Some(h) = self.header.take() {
            out.extend_from_slice(&h);
            self.sealed_len += h.len() as u64;
        }
    }

    /// A regular frame: HMAC then seal.
    fn seal_frame(
        &mut self,
        plain: &[u8],
        trailer: Option<&[u8; TRAILER_LEN]>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.hmac.update(plain);
        self.plaintext_len += plain.len() as u64;
        self.seal_raw(plain, FLAG_REGULAR, trailer, out)
    }

    fn seal_raw(
        &mut self,
        plain: &[u8],
        flag: u8,
        trailer: Option<&[u8; TRAILER_LEN]>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if self.seq >= MAX_FRAMES {
            return Err(Error::malformed("too many frames in one sealed result"));
        }
        let len = plain.len() as u32;
        out.reserve(FRAME_PREFIX_LEN + plain.len() + TAG_LEN);
        out.push(flag);
        out.extend_from_slice(&len.to_be_bytes());
        let at = out.len();
        out.extend_from_slice(plain);
        let aad = FrameAad::new(&self.keys.header_hash, self.seq, flag, len, trailer);
        let tag = self
            .keys
            .cipher
            .seal_in_place_separate_tag(frame_nonce(self.seq), aad.aad(), &mut out[at..])
            .map_err(|_| Error::internal("encryption failed"))?;
        out.extend_from_slice(tag.as_ref());
        self.seq += 1;
        self.sealed_len += (FRAME_PREFIX_LEN + plain.len() + TAG_LEN) as u64;
        Ok(())
    }
}
