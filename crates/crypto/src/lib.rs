//! Fetcher's cryptography: the key ring, credential protection, sealed results and
//! signed queue envelopes.
//!
//! The formats, keys and envelopes are described in `docs/results.md`; everything that
//! touches the reference's formats reproduces its test vectors byte for byte (see the
//! unit tests of each module).
//!
//! # Module map
//!
//! | module | what it owns | main items |
//! |---|---|---|
//! | [`keys`] | master key parsing (Base64, ≥ 32 bytes), HKDF-SHA256 derivation of the four purpose keys with the reference labels, versioned [`KeyRing`] | [`MasterKey`], [`KeyRing`], [`DerivedKeys`], [`KeyPurpose`] |
//! | [`source`] | where master keys come from: the [`MasterKeySource`] trait (async-capable, runtime-free), environment and static implementations | [`EnvMasterKeySource`], [`StaticMasterKeySource`] |
//! | [`credential`] | AES-256-GCM of datasource passwords, reference format, versioned | [`CredentialCipher`], [`Protected`] |
//! | [`v1`] | sealed result in the reference format: document HMAC + AES-256-GCM, Base64 text | [`seal_v1`], [`open_v1`], [`document_hmac`] |
//! | [`v2`] | our streaming sealed result: framed AES-256-GCM, per-object key, HMAC trailer | [`Sealer`], [`Opener`], [`SealWriter`], [`OpenReader`] |
//! | [`envelope`] | signed queue-message envelope: canonical payload, sign, verify with freshness | [`MessageSigner`], [`Envelope`], [`ReceivedHeaders`] |
//! | [`error`] | the crate's single error type | [`Error`], [`ErrorKind`] |
//!
//! A typical host builds one [`KeyRing`] at cold start (`KeyRing::load(&source).await`),
//! then hands clones of it to a [`CredentialCipher`], to [`Sealer`]/[`Opener`], and to
//! two [`MessageSigner`]s (internal key for jobs, external key for terminal events).
//!
//! ```
//! use fetcher_crypto::{CredentialCipher, KeyRing, Opener, Sealer};
//!
//! let ring = KeyRing::from_base64("dGhpcy1pcy1hLTMyLWJ5dGUtbWFzdGVyLWtleTEyMzQ=", "1")?;
//!
//! let creds = CredentialCipher::new(ring.clone());
//! let stored = creds.protect("s3cr3t")?;
//! assert_eq!(&*creds.reveal(&stored.ciphertext, &stored.key_version)?, "s3cr3t");
//!
//! let mut sealer = Sealer::new(&ring, "job-1")?;
//! let mut object = sealer.update(b"{\"id\":1}\n")?;
//! let (tail, sealed) = sealer.finish()?;
//! object.extend_from_slice(&tail);
//!
//! let mut opener = Opener::new(&ring, "job-1");
//! let plaintext = opener.update(&object)?;
//! let opened = opener.finish()?; // fails if the object was truncated
//! assert_eq!(&plaintext[..], b"{\"id\":1}\n");
//! assert_eq!(opened.hmac, sealed.hmac);
//! # Ok::<(), fetcher_crypto::Error>(())
//! ```
//!
//! # Backend
//!
//! All primitives come from **aws-lc-rs** (AES-256-GCM, HMAC-SHA256, HKDF-SHA256, SHA-256,
//! system RNG); `subtle` provides constant-time comparison, `zeroize` wipes key material
//! and plaintext buffers. No primitive is implemented here. aws-lc-rs was chosen on
//! measured throughput (on the development machine, 64 KiB AES-256-GCM: aws-lc-rs
//! ≈ 2.7–3.2 GB/s vs RustCrypto `aes-gcm` ≈ 1.1 GB/s; HMAC-SHA256 ≈ 1.55 GB/s for
//! both), it builds with only a C compiler on x86_64/aarch64 Linux (no cmake, no nasm),
//! and the AWS SDK pulls it in anyway. See `README.md` for the figures.
//!
//! # Error policy
//!
//! One error type, [`Error`], with an [`ErrorKind`] and [`Error::is_retryable`]. Only
//! key-source outages ([`ErrorKind::SourceUnavailable`]) and transient I/O errors of the
//! stream adapters are retryable; a format, key or authentication failure never is.
//! Messages are fixed texts: they never contain key bytes, plaintext, ciphertext,
//! signatures or input Base64 (a key-version label may appear; labels are not secret).
//! Authentication failures do not say which check failed beyond a coarse hint. Nothing
//! panics on hostile input, and no operation returns plaintext that has not
//! authenticated (see [`Opener`] for the streaming rule).
//!
//! Key material (master keys, derived keys, HKDF output, decrypted credentials, opened v1
//! plaintext, buffered v2 plaintext) is held in `Zeroizing` buffers and wiped on drop;
//! every type holding a key has a redacting `Debug`. aws-lc key objects (AES key
//! schedules, HMAC contexts) are built from those buffers when needed and are cleansed by
//! aws-lc when freed (best effort: byte copies made when Rust moves such an object are
//! outside anyone's control).
//!
//! # Key versions
//!
//! Each master key has a version label (`APP_ENC_KEY_VERSION`, default `"1"`; on AWS the
//! secret version). The ring's *current* version protects, seals and signs; older
//! versions stay readable: [`CredentialCipher::reveal`] takes the stored label, a v2
//! header names its version, and [`MessageSigner::from_ring`] verifies with every
//! version. Rotation means adding a version, never rewriting data. v1 objects carry no
//! version (reference format); [`SealedV1::key_version`] should be stored next to them.
//!
//! The empty label is reserved: a stored credential with an empty label is an *internal*
//! datasource whose password is stored in clear (docs/results.md, "Key versions"). This
//! crate never produces the empty label and refuses to decrypt under it
//! ([`ErrorKind::InternalCredential`]); the caller decides "internal" from an explicit flag
//! (see the differences below).
//!
//! # Format v1 (reference)
//!
//! `hmac = hex(HMAC-SHA256(external key, plaintext))`;
//! `object = Base64Std(nonce[12] ‖ AES-256-GCM(storage key, nonce, plaintext, aad = ∅) ‖ tag[16])`
//! with a random nonce. See [`v1`].
//!
//! # Format v2 (streaming) — byte layout
//!
//! All integers are unsigned big-endian. `‖` is concatenation. An object is
//! `header ‖ frame_0 ‖ … ‖ frame_n ‖ trailer`, where `frame_n` is the only final frame.
//!
//! **Header** (`V` = key-version length, `J` = job-id length):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `46 54 53 52` (ASCII `FTSR`) |
//! | 4 | 1 | format version `02` |
//! | 5 | 1 | suite `01`: HKDF-SHA256 per-object key + commitment, AES-256-GCM frames, HMAC-SHA256 trailer |
//! | 6 | 4 | frame size `F` in plaintext bytes (u32; writers use 65536; readers accept 1..=1048576) |
//! | 10 | 1 | `V` (1..=128) |
//! | 11 | V | key version label (visible ASCII except `,`) |
//! | 11+V | 1 | `J` (1..=255) |
//! | 12+V | J | job id (UTF-8) |
//! | 12+V+J | 32 | salt (random per object) |
//! | 44+V+J | 32 | key commitment `C` |
//!
//! Header length = 76 + V + J. `P` = header bytes `[0, 44+V+J)` (everything before the
//! commitment); `H = SHA-256(P)`.
//!
//! **Per-object keys.** `OKM = HKDF-SHA256(salt = header salt, IKM = storage key of
//! version label, info = "fetcher-result-v2" ‖ H, L = 64)`; data key `K = OKM[0..32]`,
//! commitment `C' = OKM[32..64]`. A reader recomputes `C'` and compares it with `C` in
//! constant time before touching any frame (header authentication and key commitment).
//!
//! **Frame `i`** (`i` = 0, 1, …; at most 2^32 frames):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | flag: `00` regular, `01` final |
//! | 1 | 4 | plaintext length `L`: regular frames `L = F`; the final frame `0 ≤ L ≤ F` |
//! | 5 | L | AES-256-GCM ciphertext |
//! | 5+L | 16 | GCM tag |
//!
//! * nonce_i = `00 00 00 00 ‖ u64(i)` (12 bytes), under `K`;
//! * AAD_i = `H ‖ u64(i) ‖ flag ‖ u32(L)`, and for the final frame additionally `‖ T`
//!   (the trailer below), i.e. 45 or 77 bytes.
//!
//! **Trailer** (immediately after the final frame, then end of object): `T` = 32 bytes,
//! raw HMAC-SHA256(external HMAC key of the version label, entire plaintext). Its hex
//! form is the document HMAC recorded in the job, identical to v1's for the same bytes.
//!
//! **Reader rules.** Fail on: bad magic/version/suite, `F` or `V` or `J` out of range,
//! unknown key version, job id ≠ expected, commitment mismatch, bad flag, regular frame
//! with `L ≠ F`, final frame with `L > F`, GCM failure, trailer ≠ recomputed HMAC, any
//! byte after the trailer, or end of input before the trailer (truncation). Release a
//! frame's plaintext only after its tag verifies; release the final frame's plaintext
//! only after the trailer verifies. Writers emit regular frames as soon as `F` bytes are
//! buffered, so their final frame has `L < F` (possibly 0); readers accept `L = F`.
//!
//! **Why this design.** Following the AWS Encryption SDK, every object gets its own data
//! key derived from the long-lived storage key and a 256-bit random salt, so the frame
//! nonce can be a plain counter: nonces never repeat under a key (a key repeats only if
//! two salts collide, probability ≈ n²/2^257), there is no per-key object-count limit
//! as with random 96-bit nonces, and no nonce state must be kept. The alternative (random
//! nonce prefix + counter under the shared storage key) puts all objects under one GCM key
//! and risks a catastrophic nonce collision after ~2^32 objects with a 64-bit prefix.
//! Binding `H` (magic, version, suite, frame size, key version, job id, salt) into the key
//! derivation and every frame's AAD, plus the sequence number and final flag, makes
//! reordered, dropped, duplicated or spliced frames fail authentication and makes
//! truncation detectable; the commitment prevents a crafted object from opening
//! differently under two keys.
//!
//! # Envelopes
//!
//! See [`envelope`], and docs/results.md "Signed queue messages", for the canonical
//! payload and the verification order.
//!
//! # Differences from the reference
//!
//! * **Key rotation**: the reference decrypts only the single configured
//!   version. Here the ring keeps older versions readable; credentials, v2 results and
//!   envelopes written under an older version still open.
//! * **Empty-password credentials**: the reference skips encryption of
//!   an empty password and stores the empty version label, which then reads as
//!   "internal" and bypasses the SSRF guard. [`CredentialCipher::protect`] always
//!   encrypts and always returns a non-empty version; `reveal` refuses the empty label
//!   instead of passing text through, so "internal" must be an explicit flag.
//! * **Document HMAC**: computed over the plaintext only, as the
//!   reference code does, not over `<timestamp>.<body>` as its stale guide says.
//! * **Freshness arithmetic** cannot overflow on extreme `t` values; the window is
//!   configurable through [`VerifyPolicy`] (defaults: 5 min age, 30 s future) so SQS
//!   redeliveries are accepted (docs/results.md, "Verification").
//! * **Envelope verification across rotations**: [`MessageSigner::from_ring`] accepts a
//!   signature from any ring version (every key is tried, so timing does not reveal
//!   which), where the reference rejects all in-flight messages after a key change.
//! * **v2** is new (the reference has only v1); v1 stays byte-compatible.
//!
//! # Dependencies
//!
//! aws-lc-rs, subtle, zeroize, base64, thiserror, serde, serde_json (only to read the
//! body's `jobId` for the envelope's canonical payload).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod credential;
mod encoding;
pub mod envelope;
pub mod error;
pub mod keys;
pub mod sealed;
pub mod source;
pub mod v1;
pub mod v2;

pub use credential::{CredentialCipher, Protected};
pub use envelope::{
    Envelope, MessageSigner, ReceivedHeaders, SignatureHeaders, Timestamp, Verified, VerifyPolicy,
};
pub use error::{Error, ErrorKind, Result};
pub use keys::{
    DerivedKeys, KeyPurpose, KeyRing, MasterKey, MasterKeys, SecretKey, VersionedMasterKey,
    is_internal_key_version,
};
pub use sealed::{SealedFormat, open_sealed};
pub use source::{BoxFuture, EnvMasterKeySource, MasterKeySource, StaticMasterKeySource};
pub use v1::{SealedV1, document_hmac, open_v1, seal_v1};
pub use v2::{OpenReader, OpenSummary, Opener, SealSummary, SealWriter, Sealer};
pub use zeroize::Zeroizing;
