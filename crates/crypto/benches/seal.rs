//! Seal/open throughput for result formats v1 and v2.
//!
//! `CARGO_TARGET_DIR=/work/target-crypto cargo bench -p fetcher-crypto --bench seal`
//! Throughput is reported per plaintext byte (criterion prints GiB/s).

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fetcher_crypto::{KeyRing, MasterKey, OpenReader, SealWriter, Sealer, open_v1, seal_v1};

const MIB: usize = 1024 * 1024;
const JOB: &str = "0192f6a0-7b1c-7d2e-8f3a-4b5c6d7e8f90";

fn ring() -> KeyRing {
    KeyRing::single("1", MasterKey::from_bytes(vec![7u8; 32]).unwrap()).unwrap()
}

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn sizes() -> [(usize, usize); 2] {
    // (size, sample size): keep the 256 MiB case short.
    [(MIB, 20), (256 * MIB, 10)]
}

fn v1(c: &mut Criterion) {
    let ring = ring();
    let mut g = c.benchmark_group("v1");
    for (n, samples) in sizes() {
        let data = plaintext(n);
        g.throughput(Throughput::Bytes(n as u64));
        g.sample_size(samples);
        g.measurement_time(Duration::from_secs(if n > MIB { 20 } else { 5 }));
        g.bench_with_input(BenchmarkId::new("seal", label(n)), &data, |b, d| {
            b.iter(|| black_box(seal_v1(ring.current(), d).unwrap()))
        });
        let sealed = seal_v1(ring.current(), &data).unwrap();
        g.bench_with_input(BenchmarkId::new("open", label(n)), &sealed, |b, s| {
            b.iter(|| black_box(open_v1(ring.current(), s.object.as_bytes(), &s.hmac).unwrap()))
        });
    }
    g.finish();
}

fn v2(c: &mut Criterion) {
    let ring = ring();
    let mut g = c.benchmark_group("v2");
    for (n, samples) in sizes() {
        let data = plaintext(n);
        g.throughput(Throughput::Bytes(n as u64));
        g.sample_size(samples);
        g.measurement_time(Duration::from_secs(if n > MIB { 20 } else { 5 }));
        // Streaming seal into a sink, 64 KiB writes (constant memory).
        g.bench_with_input(BenchmarkId::new("seal_stream", label(n)), &data, |b, d| {
            b.iter(|| {
                let mut w = SealWriter::new(std::io::sink(), &ring, JOB).unwrap();
                for chunk in d.chunks(64 * 1024) {
                    w.write_all(chunk).unwrap();
                }
                black_box(w.finish().unwrap().1)
            })
        });
        // Push API with a reused output buffer.
        g.bench_with_input(BenchmarkId::new("seal_push", label(n)), &data, |b, d| {
            let mut out = Vec::with_capacity(300 * 1024);
            b.iter(|| {
                let mut s = Sealer::new(&ring, JOB).unwrap();
                for chunk in d.chunks(256 * 1024) {
                    out.clear();
                    s.update_into(chunk, &mut out).unwrap();
                    black_box(&out);
                }
                out.clear();
                black_box(s.finish_into(&mut out).unwrap())
            })
        });
        let mut w = SealWriter::new(Vec::with_capacity(n + n / 1000 + 1024), &ring, JOB).unwrap();
        w.write_all(&data).unwrap();
        let (sealed, _) = w.finish().unwrap();
        g.bench_with_input(
            BenchmarkId::new("open_stream", label(n)),
            &sealed,
            |b, s| {
                b.iter(|| black_box(OpenReader::new(&s[..], &ring, JOB).verify_to_end().unwrap()))
            },
        );
    }
    g.finish();
}

fn label(n: usize) -> String {
    format!("{}MiB", n / MIB)
}

criterion_group!(benches, v1, v2);
criterion_main!(benches);
