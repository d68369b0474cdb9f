//! Which stripefs FUSE mount a local path lies under, and with which cluster file: so
//! that programs on the machine reach a path on the mount with the native client (the
//! Open MPI components through `stripefs_resolve_mount_path`, the interception
//! library). Parsing is pure and tested here; callers read `/proc/self/mountinfo`.

use std::path::{Component, Path, PathBuf};

/// The file system type a stripefs mount shows in the mount table: with its FUSE
/// subtype when fusermount3 mounted it, plain "fuse" when the daemon called mount(2)
/// itself (as root), where the source tells it apart.
pub const FSTYPE: &str = "fuse.stripefs";
const FUSE: &str = "fuse";
use stripefs_rpc::config::MOUNT_SOURCE_PREFIX as SOURCE_PREFIX;

/// A path under a stripefs mount.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    /// The cluster file of the mount daemon (absolute).
    pub cluster: String,
    /// The path inside stripefs ("/dir/file").
    pub inner: String,
}

/// `path` made absolute with symbolic links resolved: the path itself if it exists,
/// else its resolved directory joined with its last component. `None` if its directory
/// does not exist either (no file system can open it then).
pub fn resolve_dir(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    let name = p.file_name()?;
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Decodes the octal escapes (`\040` for a space) of a mount table field.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `abs` relative to `base` if `base` is `abs` or one of its directories.
fn under<'a>(abs: &'a Path, base: &Path) -> Option<Vec<Component<'a>>> {
    let rest = abs.strip_prefix(base).ok()?;
    Some(rest.components().collect())
}

/// The stripefs mount of `/proc/self/mountinfo` text `table` under which the absolute
/// path `abs` lies (the innermost; of two on one directory, the later one, which hides
/// the other), with its cluster file: named by the mount source, else by
/// `$STRIPEFS_CLUSTER` for a daemon that did not name it. `None` if the path is on no
/// stripefs mount, or on one whose cluster file nobody names.
pub fn find(table: &str, abs: &Path) -> Option<Found> {
    find_with(table, abs, std::env::var("STRIPEFS_CLUSTER").ok())
}

/// One line of the mount table.
struct Entry {
    /// The device number (`major:minor`) of the file system, as `st_dev` shows it.
    dev: (u32, u32),
    /// The directory of the file system mounted there ("/" for all of it).
    root: String,
    mountpoint: PathBuf,
    fstype: String,
    source: String,
    /// The super block options (`rw,user_id=0,...`).
    options: String,
}

fn entries(table: &str) -> impl Iterator<Item = Entry> + '_ {
    table.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        if f.len() < dash + 3 || dash < 5 {
            return None;
        }
        let (major, minor) = f[2].split_once(':')?;
        Some(Entry {
            dev: (major.parse().ok()?, minor.parse().ok()?),
            root: unescape(f[3]),
            mountpoint: PathBuf::from(unescape(f[4])),
            fstype: f[dash + 1].to_string(),
            source: unescape(f[dash + 2]),
            options: f.get(dash + 3).map_or(String::new(), |o| o.to_string()),
        })
    })
}

impl Entry {
    /// The cluster file of a stripefs mount (`None` for any other file system, or a
    /// stripefs mount whose daemon named no cluster file and no `env_cluster`).
    fn cluster(&self, env_cluster: Option<String>) -> Option<String> {
        let named = self.source == "stripefs" || self.source.starts_with(SOURCE_PREFIX);
        if self.fstype != FSTYPE && !(self.fstype == FUSE && named) {
            return None;
        }
        match self.source.strip_prefix(SOURCE_PREFIX) {
            Some(c) if c.starts_with('/') => Some(c.to_string()),
            _ => env_cluster,
        }
    }
}

fn find_with(table: &str, abs: &Path, env_cluster: Option<String>) -> Option<Found> {
    // Any mount deeper than the best so far, stripefs or not, hides what is below; of
    // two on one directory, the later one.
    let mut best: Option<(usize, Entry)> = None;
    for e in entries(table) {
        if under(abs, &e.mountpoint).is_none() {
            continue;
        }
        let depth = e.mountpoint.components().count();
        if best.as_ref().map_or(true, |b| depth >= b.0) {
            best = Some((depth, e));
        }
    }
    let (_, e) = best?;
    let cluster = e.cluster(env_cluster)?;
    let mut inner = PathBuf::from(if e.root.is_empty() { "/" } else { &e.root });
    for c in under(abs, &e.mountpoint)? {
        inner.push(c.as_os_str());
    }
    Some(Found {
        cluster,
        inner: inner.to_string_lossy().into_owned(),
    })
}

/// The mount points of the stripefs mounts in `table` (whatever their cluster file).
pub fn mountpoints(table: &str) -> Vec<PathBuf> {
    entries(table)
        .filter(|e| e.cluster(Some(String::new())).is_some())
        .map(|e| e.mountpoint)
        .collect()
}

/// A stripefs mount known by its device number.
#[derive(Debug, PartialEq, Eq)]
pub struct DevMount {
    /// Its daemon's cluster file.
    pub cluster: String,
    /// Another file system is mounted somewhere below it (a name there may lead off
    /// the mount).
    pub nested: bool,
    /// The user who mounted it (its daemon's uid: FUSE's `user_id` option).
    pub owner: Option<u32>,
}

/// The stripefs mount whose device number is `dev` (`st_dev` of a file on it, as major
/// and minor), from the mount table text `table`.
pub fn of_dev(table: &str, dev: (u32, u32)) -> Option<DevMount> {
    let all: Vec<Entry> = entries(table).collect();
    let env = std::env::var("STRIPEFS_CLUSTER").ok();
    let ours: Vec<&Entry> = all.iter().filter(|e| e.dev == dev).collect();
    let last = ours.last()?;
    let cluster = last.cluster(env)?;
    // Super block options, the same on every mount of the file system.
    let owner = ours.iter().find_map(|e| {
        e.options
            .split(',')
            .find_map(|o| o.strip_prefix("user_id="))
            .and_then(|u| u.parse().ok())
    });
    let nested = all.iter().any(|o| {
        o.dev != dev
            && ours.iter().any(|e| {
                o.mountpoint != e.mountpoint && under(&o.mountpoint, &e.mountpoint).is_some()
            })
    });
    Some(DevMount {
        cluster,
        nested,
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:45 / /mnt/sfs rw,nosuid,nodev,noatime shared:20 - fuse.stripefs stripefs:/tmp/c/cluster.toml rw,user_id=0,group_id=0,default_permissions
41 40 0:46 / /mnt/sfs/tmp rw - tmpfs tmpfs rw
42 22 0:47 / /mnt/old rw - fuse.stripefs stripefs rw,user_id=0
43 22 0:45 /proj /srv/proj\\040x rw - fuse.stripefs stripefs:/tmp/c/cluster.toml rw
44 22 0:48 / /mnt/root rw - fuse stripefs:/tmp/d/cluster.toml rw
45 22 0:49 / /mnt/sshfs rw - fuse user@host:/x rw
";

    fn find_in(abs: &str, env: Option<&str>) -> Option<Found> {
        find_with(TABLE, Path::new(abs), env.map(String::from))
    }

    #[test]
    fn a_path_on_the_mount_is_found_with_its_cluster() {
        assert_eq!(
            find_in("/mnt/sfs/dir/file", None),
            Some(Found {
                cluster: "/tmp/c/cluster.toml".into(),
                inner: "/dir/file".into()
            })
        );
        assert_eq!(find_in("/mnt/sfs", None).unwrap().inner, "/");
    }

    #[test]
    fn paths_elsewhere_or_under_a_mount_inside_are_not() {
        assert_eq!(find_in("/home/x", None), None);
        assert_eq!(find_in("/mnt/sfsx/file", None), None);
        assert_eq!(find_in("/mnt/sfs/tmp/file", None), None);
    }

    #[test]
    fn a_mount_made_by_mount2_is_known_by_its_source() {
        assert_eq!(
            find_in("/mnt/root/a", None).unwrap().cluster,
            "/tmp/d/cluster.toml"
        );
        assert_eq!(find_in("/mnt/sshfs/a", Some("/etc/c.toml")), None);
    }

    #[test]
    fn a_bind_mount_of_a_subtree_maps_to_its_root() {
        assert_eq!(find_in("/srv/proj x/a", None).unwrap().inner, "/proj/a");
    }

    #[test]
    fn a_daemon_without_a_named_cluster_needs_the_environment() {
        assert_eq!(find_in("/mnt/old/f", None), None);
        assert_eq!(
            find_in("/mnt/old/f", Some("/etc/c.toml")).unwrap().cluster,
            "/etc/c.toml"
        );
    }

    #[test]
    fn a_mount_is_known_by_its_device_number() {
        assert_eq!(
            of_dev(TABLE, (0, 45)),
            Some(DevMount {
                cluster: "/tmp/c/cluster.toml".into(),
                // /mnt/sfs/tmp is a tmpfs on it.
                nested: true,
                owner: Some(0),
            })
        );
        assert_eq!(
            of_dev(TABLE, (0, 48)),
            Some(DevMount {
                cluster: "/tmp/d/cluster.toml".into(),
                nested: false,
                owner: None,
            })
        );
        assert_eq!(of_dev(TABLE, (0, 46)), None);
        assert_eq!(of_dev(TABLE, (0, 49)), None);
        assert_eq!(of_dev(TABLE, (8, 1)), None);
    }

    #[test]
    fn mount_points_are_listed() {
        let p: Vec<String> = mountpoints(TABLE)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(p, ["/mnt/sfs", "/mnt/old", "/srv/proj x", "/mnt/root"]);
    }

    #[test]
    fn escapes_decode() {
        assert_eq!(unescape("a\\040b\\011c"), "a b\tc");
        assert_eq!(unescape("end\\04"), "end\\04");
    }
}
