//! `fetcher`: thin entry point; the commands live in the library modules.

// mimalloc instead of glibc's allocator: the extraction path allocates per value (a
// connector's decoded strings, the row vectors), and under glibc malloc/free were a fifth
// of the CPU of an extraction (README, "Benchmarks").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fetcher::run()
}
