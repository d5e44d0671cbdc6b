//! Round-trips a large v2 stream in constant memory and reports throughput and peak RSS.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-crypto cargo run --release -p fetcher-crypto --example v2_roundtrip -- 1024
//! ```
//!
//! The argument is the plaintext size in MiB (default 64). Data is generated on the fly.
//! Phase 1 seals into a counting sink through [`SealWriter`] (seal throughput). Phase 2
//! seals with the push API and immediately opens the sealed bytes with an [`Opener`],
//! comparing a SHA-256 of the generated plaintext with one of the opened plaintext and
//! the trailer HMAC with the sealer's. Peak RSS is `VmHWM` from `/proc/self/status`.

use std::io::Write;
use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use fetcher_crypto::{KeyRing, MasterKey, Opener, SealWriter, Sealer};

const MIB: usize = 1024 * 1024;
const CHUNK: usize = MIB;
const JOB: &str = "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90";

/// Fills `buf` with deterministic pseudo-random bytes (splitmix64), once.
fn fill_random(buf: &mut [u8]) {
    let mut state: u64 = 0xD1B5_4A32_D192_ED03;
    for word in buf.chunks_exact_mut(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

/// Chunk `i` of the stream: the random block with `i` stamped into its first bytes, so
/// every chunk differs while generation costs nothing next to the crypto.
fn generate(i: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (nanoseconds), so the
/// throughput per core can be read even when other processes compete for the CPU.
fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64);
    let total = mib * MIB as u64;
    let chunks = total / CHUNK as u64;
    let ring = KeyRing::single("1", MasterKey::from_bytes(vec![7u8; 32])?)?;
    let mut buf = vec![0u8; CHUNK];
    println!(
        "plaintext: {mib} MiB, generated in {} KiB chunks",
        CHUNK / 1024
    );
    println!("peak RSS before sealing: {} KiB", peak_rss_kib());

    fill_random(&mut buf);

    // Warm-up (CPU frequency, allocator, page faults), not timed.
    let mut w = SealWriter::new(CountingSink(0), &ring, JOB)?;
    for i in 0..chunks.min(32) {
        generate(i, &mut buf);
        w.write_all(&buf)?;
    }
    w.finish()?;

    // Phase 1: seal only, SealWriter into a counting sink.
    let t = Instant::now();
    let c = cpu_time();
    let mut w = SealWriter::new(CountingSink(0), &ring, JOB)?;
    for i in 0..chunks {
        generate(i, &mut buf);
        w.write_all(&buf)?;
    }
    let (sink, summary) = w.finish()?;
    let seal_time = t.elapsed();
    let seal_cpu = cpu_time().saturating_sub(c);
    println!(
        "seal (SealWriter -> sink): {} bytes sealed, {} frames, {:.2} GB/s wall, {:.2} GB/s per CPU-second",
        sink.0,
        summary.frames,
        gbps(total, seal_time),
        gbps(total, seal_cpu)
    );

    // Phase 2: seal and open back, streaming, in one pass.
    let mut sealer = Sealer::new(&ring, JOB)?;
    let mut opener = Opener::new(&ring, JOB);
    let mut sealed = Vec::with_capacity(CHUNK + 64 * 1024);
    let mut plain = Vec::with_capacity(CHUNK + 64 * 1024);
    let mut h_in = digest::Context::new(&digest::SHA256);
    let mut h_out = digest::Context::new(&digest::SHA256);
    let (mut t_seal, mut t_open) = (Duration::ZERO, Duration::ZERO);
    let (mut c_seal, mut c_open) = (Duration::ZERO, Duration::ZERO);
    for i in 0..chunks {
        generate(i, &mut buf);
        h_in.update(&buf);
        sealed.clear();
        let (t, c) = (Instant::now(), cpu_time());
        sealer.update_into(&buf, &mut sealed)?;
        t_seal += t.elapsed();
        c_seal += cpu_time().saturating_sub(c);
        plain.clear();
        let (t, c) = (Instant::now(), cpu_time());
        opener.update_into(&sealed, &mut plain)?;
        t_open += t.elapsed();
        c_open += cpu_time().saturating_sub(c);
        h_out.update(&plain);
    }
    sealed.clear();
    let t = Instant::now();
    let seal_summary = sealer.finish_into(&mut sealed)?;
    t_seal += t.elapsed();
    plain.clear();
    let t = Instant::now();
    opener.update_into(&sealed, &mut plain)?;
    let open_summary = opener.finish()?;
    t_open += t.elapsed();
    h_out.update(&plain);
    let same_plaintext = h_in.finish().as_ref() == h_out.finish().as_ref();
    let same_hmac = seal_summary.hmac == open_summary.hmac;
    println!(
        "round trip (push API): seal {:.2} GB/s wall ({:.2} per CPU-second), open {:.2} GB/s wall ({:.2} per CPU-second)",
        gbps(total, t_seal),
        gbps(total, c_seal),
        gbps(total, t_open),
        gbps(total, c_open)
    );
    println!("plaintext identical: {same_plaintext}, HMAC verified and equal: {same_hmac}");
    println!("document HMAC: {}", open_summary.hmac);
    println!("peak RSS (VmHWM): {} KiB", peak_rss_kib());
    if !same_plaintext || !same_hmac || open_summary.plaintext_len != total {
        return Err("round trip mismatch".into());
    }
    Ok(())
}
