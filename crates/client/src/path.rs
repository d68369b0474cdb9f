//! Path parsing. Paths are absolute in the cluster's namespace (a leading `/` is
//! optional); empty and `.` components are skipped. `..` is refused: the client keeps
//! no working directory, and resolving `..` across symlinks belongs to the server.

use stripefs_wire::{validate_name, ErrorCode, WireError, MAX_PATH_BYTES};

/// The components of `path`, each a valid name.
pub(crate) fn components(path: &str) -> Result<Vec<&str>, WireError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(WireError::new(
            ErrorCode::NameTooLong,
            format!(
                "path of {} bytes exceeds the limit of {MAX_PATH_BYTES}",
                path.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        validate_name(c)
            .map_err(|e| WireError::new(e.code, format!("path {path:?}: {}", e.message)))?;
        out.push(c);
    }
    Ok(out)
}

/// `path` in the canonical form `/a/b` that `Resolve` takes.
pub(crate) fn normalize(path: &str) -> Result<String, WireError> {
    Ok(join(&components(path)?))
}

fn join(comps: &[&str]) -> String {
    if comps.is_empty() {
        return "/".into();
    }
    comps.iter().fold(String::new(), |mut s, c| {
        s.push('/');
        s.push_str(c);
        s
    })
}

/// The parent directory of `path` (canonical) and its final name.
pub(crate) fn split_parent(path: &str) -> Result<(String, String), WireError> {
    let comps = components(path)?;
    let Some((name, parent)) = comps.split_last() else {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("path {path:?} names the root, which has no parent"),
        ));
    };
    Ok((join(parent), name.to_string()))
}

/// `name` inside directory `dir` (canonical).
pub(crate) fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("").unwrap(), "/");
        assert_eq!(normalize("a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(split_parent("/a/b").unwrap(), ("/a".into(), "b".into()));
        assert_eq!(split_parent("x").unwrap(), ("/".into(), "x".into()));
        assert_eq!(child("/", "x"), "/x");
        assert_eq!(child("/a", "x"), "/a/x");
    }

    #[test]
    fn refused() {
        for bad in ["/a/../b", "/..", "/a\0b"] {
            assert_eq!(
                normalize(bad).unwrap_err().code,
                ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
        assert_eq!(
            split_parent("/").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let long = format!("/{}", "x".repeat(300));
        assert_eq!(normalize(&long).unwrap_err().code, ErrorCode::NameTooLong);
    }
}
