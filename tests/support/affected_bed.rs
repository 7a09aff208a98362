//! The "affected" bed: PID 1 runs with the pre-v242 sd-bus of systemd#11809.
//!
//! `tests/bed/prepare.sh` runs `tests/bed/affected-libsystemd.sh` on the rootfs and prints
//! `AFFECTED_LIBSYSTEMD=<cached copy>` (empty when it could not make one outside CI; under
//! `CI=true` prepare.sh fails instead). A bed booted with [`BedOptions::affected_with_pleg_guard`]
//! (or `affected_systemd: true`) bind-mounts that copy read-only over
//! `/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so`, and at boot
//! [`verify_pid1_maps`] proves PID 1 really runs it: the mapping's device and inode are the
//! copy's, and the code PID 1 mapped from it (every executable segment, sd-bus included) is byte
//! for byte the copy's contents at that file offset (read through `/proc/PID/mem`). A bed that cannot
//! show this panics: never a silent test against a fixed PID 1.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use super::{BedEnv, BedOptions, require_bed, under_ci};

/// Where PID 1 loads sd-bus from in a bookworm bed.
pub const LIBSYSTEMD_SHARED: &str = "/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so";

impl BedOptions {
    /// An affected bed (pre-v242 sd-bus in PID 1) with the pleg-guard binary of this test run.
    pub fn affected_with_pleg_guard() -> Self {
        BedOptions {
            affected_systemd: true,
            ..Self::with_pleg_guard()
        }
    }
    /// An affected bed without pleg-guard.
    pub fn affected() -> Self {
        BedOptions {
            affected_systemd: true,
            ..Default::default()
        }
    }
}

/// [`require_bed`] plus the affected library: None (SKIPPED) off CI when it is missing, a
/// panic under `CI=true`.
pub fn require_affected_bed() -> Option<BedEnv> {
    let env = require_bed()?;
    match &env.affected_libsystemd {
        Some(p) if p.is_file() => Some(env),
        other => {
            let reason = format!(
                "no affected libsystemd-shared-252.so (prepare.sh printed {other:?}; see \
                 tests/bed/affected-libsystemd.sh)"
            );
            if under_ci() {
                panic!("the affected bed is required under CI=true: {reason}");
            }
            eprintln!("SKIPPED: {reason}");
            None
        }
    }
}

/// `major:minor` as /proc/PID/maps prints a device (hex).
fn maps_dev(dev: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    format!("{major:02x}:{minor:02x}")
}

/// Proves the process `pid` mapped `lib` at [`LIBSYSTEMD_SHARED`]: same device and inode, and
/// each executable mapping equal to `lib`'s bytes at its file offset. Returns a one-line summary.
pub fn verify_pid1_maps(pid: u32, lib: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(lib).map_err(|e| format!("stat {}: {e}", lib.display()))?;
    let (dev, ino) = (maps_dev(meta.dev()), meta.ino().to_string());
    let file = std::fs::File::open(lib).map_err(|e| format!("open {}: {e}", lib.display()))?;
    let maps_path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&maps_path).map_err(|e| format!("read {maps_path}: {e}"))?;
    let mem_path = format!("/proc/{pid}/mem");
    let mem = std::fs::File::open(&mem_path).map_err(|e| format!("open {mem_path}: {e}"))?;
    let mut compared = 0u64;
    let mut lines = 0;
    for line in maps.lines().filter(|l| l.ends_with(LIBSYSTEMD_SHARED)) {
        lines += 1;
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 {
            return Err(format!("{maps_path}: odd line {line:?}"));
        }
        if f[3] != dev || f[4] != ino {
            return Err(format!(
                "PID 1 maps {LIBSYSTEMD_SHARED} from device {} inode {}, not the affected copy {} \
                 ({dev} inode {ino}): {line}",
                f[3],
                f[4],
                lib.display()
            ));
        }
        if !f[1].contains('x') {
            continue; // data segments are relocated (RELRO is read-only but relocated too)
        }
        let parse = |s: &str| u64::from_str_radix(s, 16).map_err(|e| format!("{line}: {e}"));
        let (a, b) = f[0]
            .split_once('-')
            .ok_or_else(|| format!("{maps_path}: odd range in {line:?}"))?;
        let (a, b, off) = (parse(a)?, parse(b)?, parse(f[2])?);
        let len = (b - a).min(meta.len().saturating_sub(off));
        let mut in_mem = vec![0u8; len as usize];
        let mut in_file = vec![0u8; len as usize];
        mem.read_exact_at(&mut in_mem, a)
            .map_err(|e| format!("read PID 1's mapping {line}: {e}"))?;
        file.read_exact_at(&mut in_file, off)
            .map_err(|e| format!("read {} at {off:#x}: {e}", lib.display()))?;
        if let Some(i) = in_mem.iter().zip(&in_file).position(|(x, y)| x != y) {
            return Err(format!(
                "PID 1's mapping {line} differs from {} at file offset {:#x}",
                lib.display(),
                off + i as u64
            ));
        }
        compared += len;
    }
    if lines == 0 || compared == 0 {
        return Err(format!(
            "PID 1 (host pid {pid}) has no executable mapping of {LIBSYSTEMD_SHARED}"
        ));
    }
    Ok(format!(
        "PID 1 maps the affected {} ({dev} inode {ino}); {compared} bytes of its code \
         compared equal",
        lib.display()
    ))
}
