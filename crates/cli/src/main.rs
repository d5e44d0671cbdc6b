//! `fetcher`: thin entry point; the commands live in the library modules.

// mimalloc instead of glibc's allocator: the extraction path allocates per value (a
// connector's decoded strings, the row vectors), and under glibc malloc/free were a fifth
// of `serve`'s CPU during an extraction (README, "Benchmarks"). The extract Lambda keeps
// glibc: there it measured no faster and 10 MiB larger.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fetcher::run()
}
