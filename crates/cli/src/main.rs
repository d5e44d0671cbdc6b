//! `fetcher`: thin entry point; the commands live in the library modules.

fn main() -> std::process::ExitCode {
    fetcher::run()
}
