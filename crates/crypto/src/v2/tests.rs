use std::io::{Read, Write};

use super::*;
use crate::keys::tests::vector_ring;
use crate::keys::{MasterKey, MasterKeys, VersionedMasterKey};
use crate::{ErrorKind, KeyRing, document_hmac};

const JOB: &str = "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90";

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn seal(ring: &KeyRing, plain: &[u8], fs: u32) -> (Vec<u8>, SealSummary) {
    let mut s = Sealer::with_frame_size(ring, JOB, fs).unwrap();
    let mut out = s.update(plain).unwrap();
    let (tail, summary) = s.finish().unwrap();
    out.extend_from_slice(&tail);
    (out, summary)
}

fn open(ring: &KeyRing, sealed: &[u8], chunk: usize) -> crate::Result<(Vec<u8>, OpenSummary)> {
    let mut o = Opener::new(ring, JOB);
    let mut out = Vec::new();
    for c in sealed.chunks(chunk.max(1)) {
        o.update_into(c, &mut out)?;
    }
    Ok((out, o.finish()?))
}

/// Offsets of frame records: (start, end) of each frame including trailer for the last.
fn frames(sealed: &[u8]) -> (usize, Vec<(usize, usize)>) {
    let h = header_len(sealed).unwrap().unwrap();
    let mut at = h;
    let mut v = Vec::new();
    while at < sealed.len() {
        let flag = sealed[at];
        let len = u32::from_be_bytes(sealed[at + 1..at + 5].try_into().unwrap()) as usize;
        let end = at + 5 + len + 16 + if flag == FLAG_FINAL { 32 } else { 0 };
        v.push((at, end));
        at = end;
    }
    (h, v)
}

#[test]
fn round_trips_sizes_and_chunkings() {
    let ring = vector_ring();
    for (n, fs) in [
        (0, 16),
        (1, 16),
        (15, 16),
        (16, 16),
        (17, 16),
        (100, 16),
        (64 * 1024 * 3 + 5, DEFAULT_FRAME_SIZE),
    ] {
        let plain = data(n);
        let (sealed, s) = seal(&ring, &plain, fs);
        assert_eq!(s.plaintext_len, n as u64);
        assert_eq!(s.sealed_len, sealed.len() as u64);
        assert_eq!(s.frames, (n / fs as usize) as u64 + 1);
        assert_eq!(s.hmac, document_hmac(ring.current(), &plain));
        assert_eq!(s.key_version, "1");
        assert!(is_v2(&sealed));
        for chunk in [1, 7, 64, 1 << 20] {
            let (out, o) = open(&ring, &sealed, chunk).unwrap();
            assert_eq!(out, plain, "n={n} chunk={chunk}");
            assert_eq!(o.hmac, s.hmac);
            assert_eq!(o.job_id, JOB);
            assert_eq!(o.frames, s.frames);
        }
    }
}

#[test]
fn sealer_chunking_is_irrelevant_to_the_plaintext() {
    let ring = vector_ring();
    let plain = data(1000);
    let mut s = Sealer::with_frame_size(&ring, JOB, 64).unwrap();
    let mut sealed = Vec::new();
    for c in plain.chunks(13) {
        s.update_into(c, &mut sealed).unwrap();
    }
    let summary = s.finish_into(&mut sealed).unwrap();
    assert_eq!(summary.frames, 1000 / 64 + 1);
    assert_eq!(open(&ring, &sealed, 100).unwrap().0, plain);
}

#[test]
fn layout_is_as_documented() {
    let ring = vector_ring();
    let (sealed, _) = seal(&ring, b"hello", 16);
    assert_eq!(&sealed[..4], b"FTSR");
    assert_eq!(sealed[4], 2);
    assert_eq!(sealed[5], 1);
    assert_eq!(&sealed[6..10], &16u32.to_be_bytes());
    assert_eq!(sealed[10], 1);
    assert_eq!(sealed[11], b'1');
    assert_eq!(sealed[12] as usize, JOB.len());
    assert_eq!(&sealed[13..13 + JOB.len()], JOB.as_bytes());
    let hl = 76 + 1 + JOB.len();
    assert_eq!(header_len(&sealed).unwrap(), Some(hl));
    assert_eq!(sealed[hl], FLAG_FINAL);
    assert_eq!(&sealed[hl + 1..hl + 5], &5u32.to_be_bytes());
    assert_eq!(sealed.len(), hl + 5 + 5 + 16 + 32);
    let trailer = &sealed[sealed.len() - 32..];
    assert_eq!(
        crate::encoding::hex_lower(trailer),
        document_hmac(ring.current(), b"hello")
    );
}

/// Independent re-implementation of the documented layout with the primitives, to check
/// the docs are precise enough to interoperate.
#[test]
fn documented_layout_decrypts_independently() {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let ring = vector_ring();
    let plain = data(40);
    let (sealed, _) = seal(&ring, &plain, 16);
    let v = sealed[10] as usize;
    let j = sealed[11 + v] as usize;
    let p_len = 44 + v + j;
    let salt = &sealed[12 + v + j..p_len];
    let h = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &sealed[..p_len]);
    let mut okm = [0u8; 64];
    crate::keys::hkdf_sha256(
        salt,
        ring.current()
            .key(crate::KeyPurpose::Storage)
            .expose_secret(),
        &[b"fetcher-result-v2", h.as_ref()],
        &mut okm,
    )
    .unwrap();
    assert_eq!(&okm[32..], &sealed[p_len..p_len + 32]);
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &okm[..32]).unwrap());
    let mut at = p_len + 32;
    let mut out = Vec::new();
    for i in 0u64.. {
        let flag = sealed[at];
        let len = u32::from_be_bytes(sealed[at + 1..at + 5].try_into().unwrap());
        let mut aad = h.as_ref().to_vec();
        aad.extend_from_slice(&i.to_be_bytes());
        aad.push(flag);
        aad.extend_from_slice(&len.to_be_bytes());
        let end = at + 5 + len as usize + 16;
        if flag == 1 {
            aad.extend_from_slice(&sealed[end..end + 32]);
        }
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&i.to_be_bytes());
        let mut buf = sealed[at + 5..end].to_vec();
        let p = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut buf,
            )
            .unwrap();
        out.extend_from_slice(p);
        at = end;
        if flag == 1 {
            assert_eq!(at + 32, sealed.len());
            break;
        }
    }
    assert_eq!(out, plain);
}

#[test]
fn every_truncation_fails_without_releasing_the_final_frame() {
    let ring = vector_ring();
    let plain = data(50);
    let (sealed, _) = seal(&ring, &plain, 16);
    for cut in 0..sealed.len() {
        let mut o = Opener::new(&ring, JOB);
        let mut out = Vec::new();
        let r = o.update_into(&sealed[..cut], &mut out);
        assert!(r.is_ok(), "a prefix is not an error by itself (cut {cut})");
        assert!(out.len() <= 48, "final frame released early (cut {cut})");
        assert_eq!(&out[..], &plain[..out.len()]);
        assert_eq!(
            o.finish().unwrap_err().kind(),
            ErrorKind::Truncated,
            "cut {cut}"
        );
    }
}

#[test]
fn bit_flips_anywhere_fail() {
    let ring = vector_ring();
    let plain = data(40);
    let (sealed, _) = seal(&ring, &plain, 16);
    for i in 0..sealed.len() {
        for bit in [0, 3, 7] {
            let mut bad = sealed.clone();
            bad[i] ^= 1 << bit;
            let e = open(&ring, &bad, 1 << 20).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::Authentication
                        | ErrorKind::Malformed
                        | ErrorKind::Truncated
                        | ErrorKind::UnknownKeyVersion
                ),
                "byte {i}: {e:?}"
            );
        }
    }
}

#[test]
fn frame_reorder_drop_duplicate_and_trailing_data_fail() {
    let ring = vector_ring();
    let (sealed, _) = seal(&ring, &data(64), 16); // 4 regular + empty final
    let (h, fr) = frames(&sealed);
    assert_eq!(fr.len(), 5);
    let rebuild = |order: &[usize]| {
        let mut v = sealed[..h].to_vec();
        for &k in order {
            v.extend_from_slice(&sealed[fr[k].0..fr[k].1]);
        }
        v
    };
    for order in [
        &[1, 0, 2, 3, 4][..],
        &[0, 1, 3, 2, 4],
        &[0, 2, 3, 4],
        &[0, 1, 1, 2, 3, 4],
        &[0, 1, 2, 3],
    ] {
        let e = open(&ring, &rebuild(order), 1000).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Authentication | ErrorKind::Truncated),
            "{order:?}: {e:?}"
        );
    }
    assert_eq!(
        open(&ring, &rebuild(&[0, 1, 2, 3, 4]), 1000).unwrap().0,
        data(64)
    );
    let mut extra = sealed.clone();
    extra.push(0);
    assert_eq!(
        open(&ring, &extra, 1000).unwrap_err().kind(),
        ErrorKind::Malformed
    );
}

#[test]
fn splicing_between_objects_and_jobs_fails() {
    let ring = vector_ring();
    let (a, _) = seal(&ring, &data(64), 16);
    let (b, _) = seal(&ring, &data(64), 16); // same job, same plaintext, other salt
    let (ha, fa) = frames(&a);
    let (_, fb) = frames(&b);
    let mut spliced = a[..fa[1].0].to_vec();
    spliced.extend_from_slice(&b[fb[1].0..]);
    assert_eq!(
        open(&ring, &spliced, 1000).unwrap_err().kind(),
        ErrorKind::Authentication
    );
    // b's header with a's frames.
    let mut swapped = b[..ha].to_vec();
    swapped.extend_from_slice(&a[ha..]);
    assert_eq!(
        open(&ring, &swapped, 1000).unwrap_err().kind(),
        ErrorKind::Authentication
    );
    // Another job's object.
    let mut other = Sealer::with_frame_size(&ring, "other-job", 16).unwrap();
    let mut o = other.update(&data(10)).unwrap();
    o.extend(other.finish().unwrap().0);
    assert_eq!(
        open(&ring, &o, 1000).unwrap_err().kind(),
        ErrorKind::Authentication
    );
    let mut any = Opener::new_any_job(&ring);
    assert_eq!(&any.update(&o).unwrap()[..], &data(10)[..]);
    assert_eq!(any.finish().unwrap().job_id, "other-job");
    // Editing the job id in the header (same length) breaks the commitment.
    let mut edited = a.clone();
    edited[13] ^= 0x01;
    let mut op = Opener::new_any_job(&ring);
    assert_eq!(
        op.update(&edited).unwrap_err().kind(),
        ErrorKind::Authentication
    );
}

#[test]
fn keys_and_versions() {
    let k1 = MasterKey::from_bytes(vec![1u8; 32]).unwrap();
    let k2 = MasterKey::from_bytes(vec![2u8; 32]).unwrap();
    let old = KeyRing::single("1", k1.clone()).unwrap();
    let (sealed, _) = seal(&old, b"data", 16);
    let rotated = KeyRing::new(MasterKeys {
        current: VersionedMasterKey::new("2", k2.clone()).unwrap(),
        previous: vec![VersionedMasterKey::new("1", k1).unwrap()],
    })
    .unwrap();
    assert_eq!(open(&rotated, &sealed, 5).unwrap().1.key_version, "1");
    let only_new = KeyRing::single("2", k2.clone()).unwrap();
    assert_eq!(
        open(&only_new, &sealed, 5).unwrap_err().kind(),
        ErrorKind::UnknownKeyVersion
    );
    let wrong_key_same_label = KeyRing::single("1", k2).unwrap();
    assert_eq!(
        open(&wrong_key_same_label, &sealed, 5).unwrap_err().kind(),
        ErrorKind::Authentication
    );
}

#[test]
fn bad_headers_and_inputs() {
    let ring = vector_ring();
    let kind = |b: &[u8]| open(&ring, b, 1000).unwrap_err().kind();
    assert_eq!(kind(b""), ErrorKind::Truncated);
    assert_eq!(kind(b"FTS"), ErrorKind::Truncated);
    assert_eq!(kind(b"XXXX"), ErrorKind::Malformed);
    assert_eq!(kind(b"AAECAwQFBgcICQoLwg34"), ErrorKind::Malformed); // a v1 object
    assert_eq!(kind(b"FTSR\x01"), ErrorKind::Malformed);
    assert_eq!(kind(b"FTSR\x02\x02"), ErrorKind::Malformed);
    assert_eq!(
        kind(b"FTSR\x02\x01\x00\x00\x00\x00\x01"),
        ErrorKind::Malformed
    ); // frame size 0
    assert_eq!(
        kind(b"FTSR\x02\x01\x00\x20\x00\x00\x01"),
        ErrorKind::Malformed
    ); // 2 MiB
    assert_eq!(
        kind(b"FTSR\x02\x01\x00\x00\x00\x10\x00"),
        ErrorKind::Malformed
    ); // V = 0
    assert_eq!(
        kind(b"FTSR\x02\x01\x00\x00\x00\x10\x01\x31\x00"),
        ErrorKind::Malformed
    ); // J = 0
    assert_eq!(
        kind(b"FTSR\x02\x01\x00\x00\x00\x10\x01 \x01j"),
        ErrorKind::Truncated
    );
    let (sealed, _) = seal(&ring, b"x", 16);
    let mut bad_flag = sealed.clone();
    let h = header_len(&sealed).unwrap().unwrap();
    bad_flag[h] = 7;
    assert_eq!(kind(&bad_flag), ErrorKind::Malformed);
    let mut long_final = sealed.clone();
    long_final[h + 1..h + 5].copy_from_slice(&17u32.to_be_bytes());
    assert_eq!(kind(&long_final), ErrorKind::Malformed);
    assert!(Sealer::new(&ring, "").is_err());
    assert!(Sealer::new(&ring, &"j".repeat(256)).is_err());
    assert!(Sealer::with_frame_size(&ring, JOB, 0).is_err());
}

#[test]
fn expected_hmac_and_poisoning() {
    let ring = vector_ring();
    let (sealed, s) = seal(&ring, &data(20), 16);
    let mut o = Opener::new(&ring, JOB).expect_hmac(&s.hmac);
    assert_eq!(o.update(&sealed).unwrap().len(), 20);
    assert!(o.is_done());
    let mut o = Opener::new(&ring, JOB).expect_hmac(&"0".repeat(64));
    let mut out = Vec::new();
    assert_eq!(
        o.update_into(&sealed, &mut out).unwrap_err().kind(),
        ErrorKind::Authentication
    );
    assert!(out.is_empty());
    assert!(o.update_into(b"", &mut out).is_ok());
    assert!(o.update_into(b"x", &mut out).is_err());
    assert_eq!(o.finish().unwrap_err().kind(), ErrorKind::Authentication);
}

#[test]
fn io_adapters_round_trip() {
    let ring = vector_ring();
    let plain = data(300_000);
    let mut w = SealWriter::new(Vec::new(), &ring, JOB).unwrap();
    for c in plain.chunks(10_000) {
        w.write_all(c).unwrap();
    }
    let (sealed, s) = w.finish().unwrap();
    assert_eq!(s.frames, 5);
    let mut r = OpenReader::new(&sealed[..], &ring, JOB);
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    assert_eq!(out, plain);
    assert_eq!(r.summary().unwrap().hmac, s.hmac);
    assert_eq!(
        OpenReader::new(&sealed[..], &ring, JOB)
            .verify_to_end()
            .unwrap()
            .hmac,
        s.hmac
    );
    // Truncated stream: error, never a clean EOF.
    let mut r = OpenReader::new(&sealed[..sealed.len() - 1], &ring, JOB);
    let mut out = Vec::new();
    let e = r.read_to_end(&mut out).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(crate::Error::from_io(e).kind(), ErrorKind::Truncated);
    assert!(out.len() < plain.len());
    // Tampered stream.
    let mut bad = sealed.clone();
    bad[200_000] ^= 0x40;
    let e = OpenReader::new(&bad[..], &ring, JOB)
        .verify_to_end()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication);
}

#[test]
fn seal_writer_is_unusable_after_an_inner_error() {
    #[derive(Debug)]
    struct Failing(usize);
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"));
            }
            self.0 -= 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let ring = vector_ring();
    let mut w =
        SealWriter::from_sealer(Failing(1), Sealer::with_frame_size(&ring, JOB, 16).unwrap());
    w.write_all(&[1u8; 40]).unwrap();
    assert!(w.write_all(&[1u8; 40]).is_err());
    assert!(w.write_all(b"x").is_err());
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
}
