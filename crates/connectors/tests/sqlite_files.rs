//! SQLite datasources confined to an operator-named directory: the rule both the API (at
//! create and patch) and the connector (before opening) apply.

use fetcher_connectors::{SqliteFiles, SqliteRoot};

#[test]
fn files_resolve_only_inside_the_root_without_dotdot_or_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("sqlite");
    let data = dir.path().join("data");
    std::fs::create_dir_all(root_dir.join("sub")).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(root_dir.join("a.db"), b"").unwrap();
    std::fs::write(root_dir.join("sub/b.db"), b"").unwrap();
    std::fs::write(data.join("fetcher.db"), b"").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(data.join("fetcher.db"), root_dir.join("link.db")).unwrap();
    let root = SqliteRoot::new(&root_dir, &[&data]).unwrap();
    let files = SqliteFiles::Under(std::sync::Arc::new(root.clone()));
    let canonical = root.path().join("a.db");
    for ok in [canonical.to_str().unwrap(), "a.db", "./a.db", "sub/b.db"] {
        let got = files.resolve(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        assert!(got.starts_with(root.path()), "{ok} → {}", got.display());
    }
    for bad in [
        "../data/fetcher.db",
        "sub/../a.db",
        "link.db",
        "missing.db",
        "sub",
        "/etc/hostname",
    ] {
        let e = files.resolve(bad).unwrap_err();
        assert!(
            e.cause_as::<fetcher_connectors::ForbiddenHost>().is_some(),
            "{bad}: {e}"
        );
    }
    assert!(SqliteFiles::Nowhere.resolve("a.db").is_err());
    assert!(files.resolve("  ").is_err());
    // The root may neither be nor hold nor sit inside the data directory.
    assert!(SqliteRoot::new(&data, &[&data]).is_err());
    assert!(SqliteRoot::new(dir.path(), &[&data]).is_err());
    std::fs::create_dir_all(data.join("inner")).unwrap();
    assert!(SqliteRoot::new(&data.join("inner"), &[&data]).is_err());
    assert!(SqliteRoot::new(&dir.path().join("nope"), &[&data]).is_err());
}
