//! Writing the output file: all of it or nothing.
//!
//! Envoy (a restart, a hot restart) or an operator may read the file at any moment, and a
//! half-written configuration is worse than the old one. The text goes to a temporary file in the
//! same directory (a rename is atomic only within one file system), is flushed to disk, and is
//! renamed over the target; on any error the temporary file is removed and the target is as it
//! was. A replaced file keeps its permissions, so a configuration Envoy's user could read stays
//! readable; a new one is readable by everyone (0644), as configuration files are.

use std::fs::{self, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Replaces `path` with `text` atomically.
pub fn replace(path: &Path, text: &str) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".upcheck-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    file.write_all(text.as_bytes())?;
    let permissions = match fs::metadata(path) {
        Ok(existing) => existing.permissions(),
        Err(_) => Permissions::from_mode(0o644),
    };
    file.as_file().set_permissions(permissions)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_keeps_its_permissions_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("envoy.yaml");
        fs::write(&path, "old").expect("the old file");
        fs::set_permissions(&path, Permissions::from_mode(0o640)).expect("chmod");
        replace(&path, "new").expect("replaced");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["envoy.yaml"]);
    }

    #[test]
    fn a_new_file_is_readable_by_everyone() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("envoy.yaml");
        replace(&path, "new").expect("written");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }

    #[test]
    fn a_target_that_cannot_be_replaced_is_left_alone_with_no_temporary_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let target = dir.path().join("envoy.yaml");
        fs::create_dir(&target).expect("a directory where the file would go");
        fs::write(target.join("inside"), "kept").expect("a file inside");
        assert!(replace(&target, "new").is_err());
        assert_eq!(
            fs::read_to_string(target.join("inside")).expect("read"),
            "kept"
        );
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 1);
    }
}
