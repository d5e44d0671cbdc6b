//! Push-style v2 opening.

use aws_lc_rs::hmac;
use zeroize::{Zeroize, Zeroizing};

use super::{
    FLAG_FINAL, FLAG_REGULAR, FRAME_PREFIX_LEN, FrameAad, MAX_FRAMES, ObjectKeys, TAG_LEN,
    TRAILER_LEN, frame_nonce, header_len, object_keys, parse_header,
};
use crate::encoding::{ct_eq, hex_lower};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{KeyPurpose, KeyRing};

/// What a successfully opened v2 object reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenSummary {
    /// Document HMAC of the whole plaintext, lowercase hex (verified against the trailer).
    pub hmac: String,
    /// Plaintext bytes released.
    pub plaintext_len: u64,
    /// Frames read, final frame included.
    pub frames: u64,
    /// Key version named in the header.
    pub key_version: String,
    /// Job id named in the header.
    pub job_id: String,
}

enum State {
    /// Collecting header bytes in `buf`.
    Header,
    /// Reading frames.
    Frames(Box<FrameState>),
    /// Final frame and trailer verified; only end of input may follow.
    Done(OpenSummary),
    /// An error happened; every further call fails.
    Failed(ErrorKind),
}

struct FrameState {
    keys: ObjectKeys,
    hmac: hmac::Context,
    seq: u64,
    plaintext_len: u64,
    key_version: String,
    job_id: String,
}

/// Push-style opener: feed sealed bytes with [`update`](Self::update) /
/// [`update_into`](Self::update_into), get back plaintext of frames that have
/// authenticated, then call [`finish`](Self::finish), which fails unless the final frame
/// and trailer were seen and verified.
///
/// Guarantees: no plaintext byte of a frame is returned before that frame's GCM tag
/// verifies; the final frame's plaintext is returned only after the whole-stream HMAC
/// also verifies. Earlier frames are released as they authenticate, so a consumer must
/// treat everything received as provisional until `finish` (or EOF of an
/// [`OpenReader`](super::OpenReader)) succeeds. Memory is bounded by one frame.
pub struct Opener {
    ring: KeyRing,
    expected_job_id: Option<String>,
    expected_hmac: Option<String>,
    state: State,
    /// Bytes of the header or of a frame record that arrived split across updates.
    buf: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("expected_job_id", &self.expected_job_id)
            .finish_non_exhaustive()
    }
}

fn fail(kind: ErrorKind, msg: &'static str) -> Error {
    Error::new(kind, msg)
}

impl Opener {
    /// An opener that requires the header's job id to equal `expected_job_id` (so an
    /// object cannot be passed off as another job's result). Keys are chosen by the
    /// header's key version from `ring`.
    pub fn new(ring: &KeyRing, expected_job_id: &str) -> Self {
        Self::build(ring, Some(expected_job_id.to_owned()))
    }

    /// An opener that accepts any job id (forensic tools). The job id is reported in the
    /// [`OpenSummary`]; check it yourself.
    pub fn new_any_job(ring: &KeyRing) -> Self {
        Self::build(ring, None)
    }

    fn build(ring: &KeyRing, expected_job_id: Option<String>) -> Self {
        Opener {
            ring: ring.clone(),
            expected_job_id,
            expected_hmac: None,
            state: State::Header,
            buf: Zeroizing::new(Vec::new()),
        }
    }

    /// Also require the document HMAC (e.g. the `hmac` stored in the job record) to equal
    /// `hmac_hex` (lowercase hex). Checked, in constant time, before the final frame's
    /// plaintext is released.
    pub fn expect_hmac(mut self, hmac_hex: &str) -> Self {
        self.expected_hmac = Some(hmac_hex.to_owned());
        self
    }

    /// Opens `sealed` bytes and returns the plaintext that authenticated so far.
    pub fn update(&mut self, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        let mut out = Zeroizing::new(Vec::with_capacity(sealed.len()));
        self.update_into(sealed, &mut out)?;
        Ok(out)
    }

    /// As [`update`](Self::update), appending plaintext to `out`. On error nothing is
    /// appended by this call (bytes of the failing frame are wiped) and the opener is
    /// poisoned. Plaintext of earlier calls was already authenticated.
    pub fn update_into(&mut self, mut sealed: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        let result = (|| {
            while !sealed.is_empty() {
                match &self.state {
                    State::Failed(kind) => {
                        return Err(fail(*kind, "sealed result already failed to open"));
                    }
                    State::Done(_) => {
                        return Err(Error::malformed("trailing data after sealed result"));
                    }
                    State::Header => sealed = self.feed_header(sealed)?,
                    State::Frames(_) => sealed = self.feed_frame(sealed, out)?,
                }
            }
            Ok(())
        })();
        if let Err(e) = &result {
            if !matches!(self.state, State::Failed(_)) {
                self.state = State::Failed(e.kind());
            }
            out[start..].zeroize();
            out.truncate(start);
            self.buf.zeroize();
        }
        result
    }

    /// Ends the stream: succeeds only if the final frame and trailer were verified and no
    /// bytes followed.
    pub fn finish(self) -> Result<OpenSummary> {
        match self.state {
            State::Done(summary) => Ok(summary),
            State::Failed(kind) => Err(fail(kind, "sealed result failed to open")),
            State::Header | State::Frames(_) => Err(fail(
                ErrorKind::Truncated,
                "sealed result truncated: final frame missing",
            )),
        }
    }

    /// Whether the final frame and trailer have been verified.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_))
    }

    fn feed_header<'a>(&mut self, sealed: &'a [u8]) -> Result<&'a [u8]> {
        // Headers are small (≤ 459 bytes): always assembled in `buf`, a byte range at a time.
        let mut consumed = 0;
        loop {
            let need = header_len(&self.buf)?.unwrap_or(match self.buf.len() {
                n if n < 11 => 11,
                n => n + 1,
            });
            let take = (need - self.buf.len()).min(sealed.len() - consumed);
            self.buf
                .extend_from_slice(&sealed[consumed..consumed + take]);
            consumed += take;
            if header_len(&self.buf)? == Some(self.buf.len()) {
                break;
            }
            if consumed == sealed.len() {
                return Ok(&sealed[consumed..]);
            }
        }
        let header = parse_header(&self.buf)?;
        if let Some(expected) = &self.expected_job_id
            && expected.as_str() != header.job_id
        {
            return Err(Error::auth("sealed result belongs to another job"));
        }
        let derived = self.ring.get(header.key_version)?.clone();
        let (keys, commitment) = object_keys(
            &derived,
            &self.buf[..header.prefix_len],
            header.salt,
            header.frame_size,
        )?;
        if !ct_eq(&commitment[..], header.commitment) {
            return Err(Error::auth(
                "authentication failed: wrong key or tampered header",
            ));
        }
        let ext = hmac::Key::new(
            hmac::HMAC_SHA256,
            derived.key(KeyPurpose::ExternalHmac).expose_secret(),
        );
        self.state = State::Frames(Box::new(FrameState {
            keys,
            hmac: hmac::Context::with_key(&ext),
            seq: 0,
            plaintext_len: 0,
            key_version: header.key_version.to_owned(),
            job_id: header.job_id.to_owned(),
        }));
        self.buf.clear();
        Ok(&sealed[consumed..])
    }

    /// Record length from its 5-byte prefix, validating flag and length.
    fn record_len(fs: &FrameState, prefix: &[u8]) -> Result<usize> {
        let flag = prefix[0];
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
        match flag {
            FLAG_REGULAR if len == fs.keys.frame_size => {
                Ok(FRAME_PREFIX_LEN + len as usize + TAG_LEN)
            }
            FLAG_REGULAR => Err(Error::malformed("regular frame with wrong length")),
            FLAG_FINAL if len <= fs.keys.frame_size => {
                Ok(FRAME_PREFIX_LEN + len as usize + TAG_LEN + TRAILER_LEN)
            }
            FLAG_FINAL => Err(Error::malformed("final frame longer than the frame size")),
            _ => Err(Error::malformed("bad frame flag")),
        }
    }

    fn feed_frame<'a>(&mut self, sealed: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8]> {
        let State::Frames(fs) = &self.state else {
            return Err(Error::internal("opener state"));
        };
        if self.buf.is_empty() {
            // Fast path: a whole record in the input.
            if sealed.len() >= FRAME_PREFIX_LEN {
                let total = Self::record_len(fs, &sealed[..FRAME_PREFIX_LEN])?;
                if sealed.len() >= total {
                    self.open_record(&sealed[..total], out)?;
                    return Ok(&sealed[total..]);
                }
            }
        }
        // Slow path: assemble the record in `buf`.
        let mut consumed = 0;
        if self.buf.len() < FRAME_PREFIX_LEN {
            let take = (FRAME_PREFIX_LEN - self.buf.len()).min(sealed.len());
            self.buf.extend_from_slice(&sealed[..take]);
            consumed = take;
            if self.buf.len() < FRAME_PREFIX_LEN {
                return Ok(&sealed[consumed..]);
            }
        }
        let total = Self::record_len(fs, &self.buf[..FRAME_PREFIX_LEN])?;
        let take = (total - self.buf.len()).min(sealed.len() - consumed);
        self.buf
            .extend_from_slice(&sealed[consumed..consumed + take]);
        consumed += take;
        if self.buf.len() == total {
            let record = std::mem::take(&mut *self.buf);
            let record = Zeroizing::new(record);
            self.open_record(&record, out)?;
        }
        Ok(&sealed[consumed..])
    }

    /// Opens one complete record (prefix ‖ ciphertext ‖ tag [‖ trailer]).
    fn open_record(&mut self, record: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let State::Frames(fs) = &mut self.state else {
            return Err(Error::internal("opener state"));
        };
        if fs.seq >= MAX_FRAMES {
            return Err(Error::malformed("too many frames in one sealed result"));
        }
        let flag = record[0];
        let len = u32::from_be_bytes([record[1], record[2], record[3], record[4]]);
        let ct_end = FRAME_PREFIX_LEN + len as usize;
        let tag = &record[ct_end..ct_end + TAG_LEN];
        let trailer: Option<&[u8; TRAILER_LEN]> = if flag == FLAG_FINAL {
            Some(
                record[ct_end + TAG_LEN..]
                    .try_into()
                    .map_err(|_| Error::malformed("bad trailer"))?,
            )
        } else {
            None
        };
        let aad = FrameAad::new(&fs.keys.header_hash, fs.seq, flag, len, trailer);
        let at = out.len();
        out.extend_from_slice(&record[FRAME_PREFIX_LEN..ct_end]);
        let opened = fs.keys.cipher.open_in_place_separate_tag(
            frame_nonce(fs.seq),
            aad.aad(),
            tag,
            &mut out[at..],
        );
        if opened.is_err() {
            // The caller wipes and truncates `out`.
            return Err(Error::auth(
                "authentication failed: wrong key or tampered, reordered or spliced frame",
            ));
        }
        fs.hmac.update(&out[at..]);
        fs.seq += 1;
        fs.plaintext_len += u64::from(len);
        if let Some(trailer) = trailer {
            let mac = fs.hmac.clone().sign();
            if !ct_eq(mac.as_ref(), trailer) {
                return Err(Error::auth("document HMAC mismatch"));
            }
            let hmac = hex_lower(mac.as_ref());
            if let Some(expected) = &self.expected_hmac
                && !ct_eq(hmac.as_bytes(), expected.as_bytes())
            {
                return Err(Error::auth("document HMAC mismatch"));
            }
            let summary = OpenSummary {
                hmac,
                plaintext_len: fs.plaintext_len,
                frames: fs.seq,
                key_version: std::mem::take(&mut fs.key_version),
                job_id: std::mem::take(&mut fs.job_id),
            };
            self.state = State::Done(summary);
        }
        Ok(())
    }
}
