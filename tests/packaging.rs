//! The packages: the .deb installed, upgraded, removed and purged in a booted bed; the .rpm's
//! contents, config flags and scriptlets read with `rpm -qp`; both linted.
//!
//! The packages are built by the tests themselves with `packaging/build-deb.sh` and
//! `packaging/build-rpm.sh` (once per test process, into `target/packaging-test/`), unless
//! `PLEG_GUARD_DEB` / `PLEG_GUARD_RPM` name ready-made files. A second .deb with a bumped
//! version (`--deb-version <version>+upgrade`) is built for the upgrade test. Building needs
//! cargo-deb / cargo-generate-rpm and the glibc 2.17 toolchain (cargo-zigbuild, zig), which the
//! scripts install when missing.
//!
//! The packages must also suit the old distributions (RHEL/CentOS 7 and 8, Amazon Linux 2,
//! Ubuntu 18.04, Debian 10): symbol versions, payload and requirements, Depends, the unit's
//! filters and the allow-list drop-in's version check are read here; tests/old_distros.rs boots
//! the .deb on Debian 11 and 13.
//!
//! The bed tests need root and the bed (`tests/bed/prepare.sh`): locally they are SKIPPED
//! without it, under `CI=true` they fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use support::*;

const UNIT: &str = "pleg-guard.service";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Serialises package builds within this process (both scripts run cargo on target/release).
static BUILD: Mutex<()> = Mutex::new(());

/// Runs a build script and returns the package path it prints as its last stdout line.
fn build(script: &str, args: &[&str]) -> PathBuf {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let o = run_with_timeout(
        Command::new("bash")
            .arg(repo().join(script))
            .args(args)
            .current_dir(repo()),
        None,
        Duration::from_secs(1800),
    )
    .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(o.status.success(), "{script} {args:?} failed: {}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let path = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| PathBuf::from(l.trim()))
        .unwrap_or_else(|| panic!("{script} printed no package path: {}", show(&o)));
    let path = if path.is_relative() {
        repo().join(path)
    } else {
        path
    };
    assert!(
        path.is_file(),
        "{script} printed {}, which is no file",
        path.display()
    );
    eprintln!("built {} in {:?}", path.display(), started.elapsed());
    path
}

fn out_dir(name: &str) -> PathBuf {
    let d = repo().join("target/packaging-test").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The .deb of the current version.
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| match std::env::var_os("PLEG_GUARD_DEB") {
        Some(p) => PathBuf::from(p),
        None => {
            let d = out_dir("deb");
            build("packaging/build-deb.sh", &["--output", d.to_str().unwrap()])
        }
    })
}

/// A .deb of a newer version (`<version>+upgrade-1`) from the same tree.
fn newer_deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let version = deb_field(deb(), "Version");
        let upstream = version.split('-').next().unwrap().to_string();
        let d = out_dir("deb-newer");
        let newer = format!("{upstream}+upgrade-1");
        build(
            "packaging/build-deb.sh",
            &["--deb-version", &newer, "--output", d.to_str().unwrap()],
        )
    })
}

/// The .rpm.
fn rpm() -> &'static Path {
    static RPM: OnceLock<PathBuf> = OnceLock::new();
    RPM.get_or_init(|| match std::env::var_os("PLEG_GUARD_RPM") {
        Some(p) => PathBuf::from(p),
        None => {
            let d = out_dir("rpm");
            build("packaging/build-rpm.sh", &["-o", d.to_str().unwrap()])
        }
    })
}

fn deb_field(deb: &Path, field: &str) -> String {
    host_ok("dpkg-deb", &["-f", deb.to_str().unwrap(), field])
}

fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn rpm_q(args: &[&str]) -> String {
    let mut argv = vec!["-qp"];
    argv.extend_from_slice(args);
    argv.push(rpm().to_str().unwrap());
    host_ok("rpm", &argv)
}

// ------------------------------------------------------------------------------------------------
// .deb in a booted bed
// ------------------------------------------------------------------------------------------------

/// `dpkg -i`/`-r`/`-P` inside the bed, noninteractive; panics with dpkg's output on failure.
fn dpkg(bed: &Bed, args: &str) -> String {
    bed.sh_ok(&format!(
        "DEBIAN_FRONTEND=noninteractive dpkg {args} </dev/null 2>&1"
    ))
}

#[test]
fn deb_installs_upgrades_removes_and_purges_in_a_booted_bed() {
    let Some(env) = require_bed() else { return };
    let (deb, newer) = (deb().to_path_buf(), newer_deb().to_path_buf());
    // each package's directory is bound into the bed: /pkg/a (current), /pkg/b (newer)
    let bed = Bed::boot(
        &env,
        BedOptions {
            docker: false,
            pleg_guard_binary: None,
            extra_binds: vec![
                (deb.parent().unwrap().to_path_buf(), "/pkg/a".to_string()),
                (newer.parent().unwrap().to_path_buf(), "/pkg/b".to_string()),
            ],
            ..Default::default()
        },
    );
    let in_bed = |p: &Path| {
        let dir = if p == deb { "a" } else { "b" };
        format!("/pkg/{dir}/{}", p.file_name().unwrap().to_str().unwrap())
    };

    // --- install: enabled, started, started in the journal ---------------------------------
    let out = dpkg(&bed, &format!("-i {}", in_bed(&deb)));
    eprintln!("dpkg -i:\n{out}");
    assert_eq!(
        bed.sh_ok("dpkg-query -W -f '${Status}' pleg-guard"),
        "install ok installed"
    );
    assert_eq!(
        bed.sh_ok(&format!("systemctl is-enabled {UNIT}")),
        "enabled"
    );
    // Type=notify: "active" means READY=1 arrived (the daemon finished its first round).
    bed.wait_active(UNIT, "active", secs(60));
    let started = bed.journal(&["-u", UNIT, "_PID=1"]);
    assert!(
        started
            .iter()
            .any(|e| field(e, "MESSAGE").is_some_and(|m| m.starts_with("Started "))),
        "journalctl -u {UNIT} has no \"Started\" line from PID 1: {started:?}"
    );
    // what the package put where
    for f in [
        "/usr/bin/pleg-guard",
        "/usr/lib/systemd/system/pleg-guard.service",
        "/etc/pleg-guard/config.toml",
        "/usr/lib/systemd/catalog/pleg-guard.catalog",
        "/usr/share/man/man8/pleg-guard.8.gz",
        "/usr/share/bash-completion/completions/pleg-guard",
        "/usr/share/zsh/vendor-completions/_pleg-guard",
        "/usr/share/doc/pleg-guard/README.md",
        "/usr/share/doc/pleg-guard/docs/findings.md",
        "/usr/share/doc/pleg-guard/copyright",
        "/usr/share/pleg-guard/prometheus/pleg-guard.rules.yml",
        "/usr/share/pleg-guard/prometheus/pleg-guard-npd.rules.yml",
        "/usr/share/pleg-guard/npd/pleg-guard-monitor.json",
    ] {
        bed.sh_ok(&format!("test -f {f}"));
    }
    bed.sh_ok("test -d /etc/pleg-guard/config.d && test -z \"$(ls -A /etc/pleg-guard/config.d)\"");
    bed.sh_ok("test -d /var/lib/pleg-guard && test -d /run/pleg-guard");
    // systemd 252 >= 239: the allow-list drop-in is linked and in force
    assert_eq!(
        bed.sh_ok("readlink /etc/systemd/system/pleg-guard.service.d/50-syscall-allowlist.conf"),
        "/usr/lib/pleg-guard/syscall-allowlist.conf"
    );
    let filter = bed.unit_property(UNIT, "SystemCallFilter");
    assert!(
        !filter.starts_with('~') && filter.split_whitespace().any(|w| w == "kill"),
        "SystemCallFilter: {filter}"
    );
    // the unit's hardening is in force on the packaged daemon: no new privileges, and no
    // capability beyond CAP_SYS_ADMIN (bit 21) in its bounding set
    let pid = bed.unit_property(UNIT, "MainPID");
    let status = bed.read_file(&format!("/proc/{pid}/status")).unwrap();
    let get = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {k} in /proc/{pid}/status:\n{status}"))
    };
    assert_eq!(get("NoNewPrivs:"), "1");
    let bnd = u64::from_str_radix(&get("CapBnd:"), 16).unwrap();
    assert_eq!(bnd & !(1u64 << 21), 0, "CapBnd {bnd:#x}");
    assert_eq!(
        bed.sh_ok("dpkg-query -W -f '${Conffiles}' pleg-guard | awk '{print $1}'"),
        "/etc/pleg-guard/config.toml"
    );
    assert_eq!(
        bed.sh_ok("pleg-guard check-config /etc/pleg-guard/config.toml >/dev/null; echo $?"),
        "0",
        "the shipped config.toml must be valid"
    );
    // the catalog is compiled in: `journalctl -x` can explain every event kind
    let catalog = bed.sh_ok("journalctl --list-catalog | grep -c 'pleg-guard:' || true");
    let shipped = std::fs::read_to_string(repo().join("systemd/pleg-guard.catalog"))
        .expect("systemd/pleg-guard.catalog in the repo")
        .lines()
        .filter(|line| line.starts_with("-- "))
        .count();
    assert_eq!(
        catalog,
        shipped.to_string(),
        "every entry of the shipped catalog is known to journald"
    );
    let unit_path = bed.unit_property(UNIT, "FragmentPath");
    // systemd 252 on merged-/usr Debian finds it through /lib first
    assert!(
        unit_path == "/usr/lib/systemd/system/pleg-guard.service"
            || unit_path == "/lib/systemd/system/pleg-guard.service",
        "FragmentPath {unit_path}"
    );

    // --- a changed config survives reinstall and upgrade --------------------------------------
    bed.sh_ok(
        "sed -i 's/^#interval = \"10s\"$/interval = \"7s\"/' /etc/pleg-guard/config.toml && \
         echo '# local edit' >> /etc/pleg-guard/config.toml && \
         grep -qx 'interval = \"7s\"' /etc/pleg-guard/config.toml",
    );
    bed.write_file(
        "/etc/pleg-guard/config.d/50-local.toml",
        "mode = \"observe\"\n",
    );
    let edited = bed.read_file("/etc/pleg-guard/config.toml").unwrap();
    dpkg(&bed, &format!("-i {}", in_bed(&deb)));
    assert_eq!(
        bed.read_file("/etc/pleg-guard/config.toml").unwrap(),
        edited,
        "reinstall"
    );
    bed.wait_active(UNIT, "active", secs(60));

    let before = bed.unit_property(UNIT, "InvocationID");
    let out = dpkg(&bed, &format!("-i {}", in_bed(&newer)));
    eprintln!("dpkg -i (upgrade):\n{out}");
    assert_eq!(
        bed.sh_ok("dpkg-query -W -f '${Version}' pleg-guard"),
        deb_field(&newer, "Version")
    );
    assert_eq!(
        bed.read_file("/etc/pleg-guard/config.toml").unwrap(),
        edited,
        "upgrade"
    );
    assert_eq!(
        bed.read_file("/etc/pleg-guard/config.d/50-local.toml")
            .as_deref(),
        Some("mode = \"observe\"\n")
    );
    bed.sh_ok("test ! -e /etc/pleg-guard/config.toml.dpkg-new && test ! -e /etc/pleg-guard/config.toml.dpkg-dist");
    assert_eq!(
        bed.sh_ok(&format!("systemctl is-enabled {UNIT}")),
        "enabled"
    );
    bed.wait_active(UNIT, "active", secs(60));
    let after = bed.unit_property(UNIT, "InvocationID");
    assert_ne!(
        before, after,
        "the upgrade restarts the daemon on the new binary"
    );

    // --- remove: stopped, config and state kept ---------------------------------------------
    dpkg(&bed, "-r pleg-guard");
    let active = bed.sh(&format!("systemctl is-active {UNIT}"));
    let active = String::from_utf8_lossy(&active.stdout).trim().to_string();
    assert!(
        active == "inactive" || active == "unknown",
        "after dpkg -r: {active}"
    );
    bed.sh_ok(
        "test ! -e /usr/bin/pleg-guard && test ! -e /usr/lib/systemd/system/pleg-guard.service",
    );
    bed.sh_ok("test -f /etc/pleg-guard/config.toml && test -d /var/lib/pleg-guard");
    assert!(
        bed.sh("pgrep -x pleg-guard").status.code() == Some(1),
        "no pleg-guard process after dpkg -r"
    );
    assert_eq!(
        bed.sh_ok("journalctl --list-catalog | grep -c 'pleg-guard:' || true"),
        "0",
        "the catalog is dropped with the package"
    );

    // --- purge: state, config and enablement gone ---------------------------------------------
    bed.sh_ok("rm /etc/pleg-guard/config.d/50-local.toml");
    dpkg(&bed, "-P pleg-guard");
    bed.sh_ok("test ! -e /var/lib/pleg-guard");
    bed.sh_ok("test ! -e /run/pleg-guard");
    bed.sh_ok("test ! -e /etc/pleg-guard");
    bed.sh_ok("test ! -e /etc/systemd/system/multi-user.target.wants/pleg-guard.service");
    bed.sh_ok("test ! -e /etc/systemd/system/pleg-guard.service");
    let q = bed.sh("dpkg-query -W -f '${db:Status-Status}' pleg-guard 2>/dev/null");
    let status = String::from_utf8_lossy(&q.stdout).trim().to_string();
    assert!(
        !q.status.success() || status == "not-installed",
        "after dpkg -P: {status}"
    );
}

/// Installing where systemd does not run (an image build in a chroot) must not fail, must
/// enable the unit, and must not try to start it.
#[test]
fn deb_installs_in_a_chroot_without_systemd() {
    let Some(env) = require_bed() else { return };
    let deb = deb().to_path_buf();
    let dir = deb.parent().unwrap().to_path_buf();
    let bed = Bed::boot(
        &env,
        BedOptions {
            docker: false,
            pleg_guard_binary: None,
            extra_binds: vec![(dir, "/pkg".to_string())],
            ..Default::default()
        },
    );
    // The bed's own root, copied into /chroot: a Debian system where systemd is not running.
    bed.sh_ok(
        "mkdir /chroot && for d in bin boot etc home lib lib64 opt root sbin srv usr var; do \
           [ -e /$d ] && cp -a /$d /chroot/; done; mkdir -p /chroot/dev /chroot/proc /chroot/run /chroot/tmp /chroot/pkg; \
         mount --bind /pkg /chroot/pkg; mount -t proc proc /chroot/proc",
    );
    let name = deb.file_name().unwrap().to_str().unwrap();
    let out = bed.sh_ok(&format!(
        "DEBIAN_FRONTEND=noninteractive chroot /chroot dpkg -i /pkg/{name} </dev/null 2>&1"
    ));
    eprintln!("dpkg -i in chroot:\n{out}");
    bed.sh_ok("test -L /chroot/etc/systemd/system/multi-user.target.wants/pleg-guard.service");
    bed.sh_ok("test -d /chroot/etc/pleg-guard/config.d");
    // nothing started: neither in the chroot nor in the bed around it
    assert!(bed.sh("pgrep -x pleg-guard").status.code() == Some(1));
    let active = bed.sh(&format!("systemctl is-active {UNIT}"));
    assert_ne!(String::from_utf8_lossy(&active.stdout).trim(), "active");
    bed.sh_ok("DEBIAN_FRONTEND=noninteractive chroot /chroot dpkg -P pleg-guard </dev/null 2>&1");
    bed.sh_ok("test ! -e /chroot/etc/systemd/system/multi-user.target.wants/pleg-guard.service");
    bed.sh("umount /chroot/proc /chroot/pkg");
}

// ------------------------------------------------------------------------------------------------
// .rpm read with rpm -qp
// ------------------------------------------------------------------------------------------------

#[test]
fn rpm_contents_config_flags_and_scriptlets() {
    if !tool_or_skip("rpm", "rpm") {
        return;
    }
    // file list with modes and owners
    let files = rpm_q(&[
        "--queryformat",
        "[%{FILEMODES:perms} %{FILEUSERNAME} %{FILENAMES}\n]",
    ]);
    let expect = [
        "-rwxr-xr-x root /usr/bin/pleg-guard",
        "-rw-r--r-- root /usr/lib/systemd/system/pleg-guard.service",
        "-rw-r--r-- root /usr/lib/systemd/system-preset/80-pleg-guard.preset",
        "-rw-r--r-- root /etc/pleg-guard/config.toml",
        "-rw-r--r-- root /usr/lib/systemd/catalog/pleg-guard.catalog",
        "-rw-r--r-- root /usr/share/man/man8/pleg-guard.8.gz",
        "-rw-r--r-- root /usr/share/bash-completion/completions/pleg-guard",
        "-rw-r--r-- root /usr/share/zsh/site-functions/_pleg-guard",
        "-rw-r--r-- root /usr/share/doc/pleg-guard/README.md",
        "-rw-r--r-- root /usr/share/licenses/pleg-guard/LICENSE",
        "-rw-r--r-- root /usr/share/pleg-guard/prometheus/pleg-guard.rules.yml",
        "-rw-r--r-- root /usr/share/pleg-guard/prometheus/pleg-guard-npd.rules.yml",
        "-rw-r--r-- root /usr/share/pleg-guard/npd/pleg-guard-monitor.json",
        "-rw-r--r-- root /usr/lib/pleg-guard/syscall-allowlist.conf",
        "-rwxr-xr-x root /usr/lib/pleg-guard/syscall-allowlist",
    ];
    // the pages README.md links to, beside it
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("-rw-r--r-- root /usr/share/doc/pleg-guard/docs/{n}"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 10, "docs/ pages: {pages:?}");
    for e in expect
        .iter()
        .copied()
        .chain(pages.iter().map(String::as_str))
    {
        assert!(files.lines().any(|l| l == e), "rpm lacks `{e}`:\n{files}");
    }
    assert_eq!(
        files.lines().count(),
        expect.len() + pages.len(),
        "unexpected files:\n{files}"
    );

    // the config is %config(noreplace), and the only config file
    assert_eq!(rpm_q(&["-c"]), "/etc/pleg-guard/config.toml");
    let flags = rpm_q(&["--queryformat", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]"]);
    assert!(
        flags.lines().any(|l| l == "/etc/pleg-guard/config.toml cn"),
        "config.toml is not %config(noreplace):\n{flags}"
    );
    // the shipped files are the ones in the tree
    let unit = std::fs::read_to_string(repo().join("systemd/pleg-guard.service")).unwrap();
    assert!(unit.contains("Type=notify"));
    let digests = rpm_q(&["--queryformat", "[%{FILEDIGESTS} %{FILENAMES}\n]"]);
    for (path, src) in [
        (
            "/usr/lib/systemd/system/pleg-guard.service",
            "systemd/pleg-guard.service",
        ),
        ("/etc/pleg-guard/config.toml", "packaging/config.toml"),
        (
            "/usr/lib/systemd/catalog/pleg-guard.catalog",
            "systemd/pleg-guard.catalog",
        ),
    ] {
        let sum = host_ok("sha256sum", &[repo().join(src).to_str().unwrap()]);
        let sum = sum.split_whitespace().next().unwrap();
        assert!(
            digests.lines().any(|l| l == format!("{sum} {path}")),
            "{path} in the rpm differs from {src}:\n{digests}"
        );
    }

    // dependencies: systemd and the libraries the binary links, nothing else
    let requires = rpm_q(&["--requires"]);
    for r in requires.lines() {
        let ok = r == "systemd"
            || r == "/bin/sh"
            || r.starts_with("rpmlib(")
            || r.starts_with("rtld(")
            || r.starts_with("libc.so.6")
            || r.starts_with("ld-linux")
            || r.starts_with("libgcc_s.so.1")
            || r.starts_with("libm.so.6")
            // glibc 2.17 (the build target) still has these apart from libc
            || r.starts_with("libdl.so.2")
            || r.starts_with("libpthread.so.0")
            || r.starts_with("config(pleg-guard)");
        assert!(ok, "unexpected Requires: {r}\n{requires}");
    }
    assert!(requires.lines().any(|r| r == "systemd"));

    // scriptlets: the %systemd_* equivalents, each tolerant of a chroot without systemd
    let scripts = rpm_q(&["--scripts"]);
    // `rpm --scripts` prints "<name> scriptlet:" (or "<name> scriptlet (using ...):") headers
    let section = |name: &str| -> String {
        let is_header = |l: &str| {
            l.split_once(" scriptlet").is_some_and(|(w, rest)| {
                !w.contains(' ') && (rest == ":" || rest.starts_with(" ("))
            })
        };
        let mut lines = scripts
            .lines()
            .skip_while(|l| !(is_header(l) && l.starts_with(name)));
        assert!(lines.next().is_some(), "no {name} scriptlet:\n{scripts}");
        lines
            .take_while(|l| !is_header(l))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let post = section("postinstall");
    let preun = section("preuninstall");
    let postun = section("postuninstall");
    assert!(
        post.contains("systemctl --no-reload preset pleg-guard.service"),
        "{post}"
    );
    assert!(
        post.contains("systemctl start pleg-guard.service"),
        "{post}"
    );
    assert!(post.contains("journalctl --update-catalog"), "{post}");
    assert!(post.contains("mkdir -p /etc/pleg-guard/config.d"), "{post}");
    assert!(
        preun.contains("disable --now pleg-guard.service"),
        "{preun}"
    );
    assert!(
        postun.contains("systemctl try-restart pleg-guard.service"),
        "{postun}"
    );
    for (name, body) in [("%post", &post), ("%preun", &preun), ("%postun", &postun)] {
        assert!(
            body.contains("[ -d /run/systemd/system ]"),
            "{name} not chroot-safe:\n{body}"
        );
        // every scriptlet ends successfully whatever systemctl says
        assert!(
            body.trim_end().ends_with("exit 0"),
            "{name} must end with exit 0:\n{body}"
        );
    }
    // start/stop/restart only when systemd runs: every such line sits under the guard
    for line in scripts.lines() {
        let l = line.trim();
        if l.starts_with("systemctl start")
            || l.starts_with("systemctl try-restart")
            || l.contains("--now")
        {
            assert!(l.ends_with("|| :"), "not error-tolerant: {l}");
        }
    }
    // the preset enables it
    let preset =
        std::fs::read_to_string(repo().join("packaging/rpm/80-pleg-guard.preset")).unwrap();
    assert!(preset.lines().any(|l| l == "enable pleg-guard.service"));
}

/// The rpm scriptlets run where systemd is not running (like a chroot image build): each
/// exits 0 for install, upgrade and erase, with a `systemctl` that fails.
#[test]
fn rpm_scriptlets_succeed_without_systemd() {
    let tmp = std::env::temp_dir().join(format!("pleg-guard-scriptlets-{}", std::process::id()));
    std::fs::create_dir_all(tmp.join("bin")).unwrap();
    for tool in ["systemctl", "journalctl"] {
        let p = tmp.join("bin").join(tool);
        std::fs::write(&p, "#!/bin/sh\necho \"$0 $*\" >> \"$LOG\"\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for (script, args) in [
        ("post-install.sh", ["1"]),
        ("post-install.sh", ["2"]),
        ("pre-uninstall.sh", ["0"]),
        ("pre-uninstall.sh", ["1"]),
        ("post-uninstall.sh", ["0"]),
        ("post-uninstall.sh", ["1"]),
    ] {
        let text = std::fs::read_to_string(repo().join("packaging/rpm").join(script)).unwrap();
        // keep the host's /etc and /run untouched: only the control flow is under test
        let text = text
            .replace("/etc/pleg-guard", &tmp.join("etc").display().to_string())
            .replace("/run/pleg-guard", &tmp.join("run").display().to_string())
            .replace(
                "/var/lib/pleg-guard",
                &tmp.join("var").display().to_string(),
            )
            .replace(
                "/usr/lib/pleg-guard",
                &tmp.join("not-installed").display().to_string(),
            )
            .replace(
                "/run/systemd/system",
                &tmp.join("no-systemd").display().to_string(),
            );
        let o = Command::new("sh")
            .args(["-c", &text, script])
            .args(args)
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", tmp.join("bin").display()),
            )
            .env("LOG", tmp.join("log"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{script} {args:?} failed without systemd: {}",
            show(&o)
        );
    }
    let log = std::fs::read_to_string(tmp.join("log")).unwrap_or_default();
    assert!(
        !log.contains("systemctl start"),
        "started without systemd:\n{log}"
    );
    assert!(
        !log.contains("try-restart"),
        "restarted without systemd:\n{log}"
    );
    assert!(
        log.contains("preset pleg-guard.service"),
        "preset is offline-capable:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

// ------------------------------------------------------------------------------------------------
// lint
// ------------------------------------------------------------------------------------------------

#[test]
fn lintian_is_clean() {
    if !tool_or_skip("lintian", "lintian") {
        return;
    }
    // overrides are shipped in the package (usr/share/lintian/overrides/pleg-guard)
    let o = Command::new("lintian")
        .args(["-EIL", "+pedantic", "--fail-on", "error,warning"])
        .arg(deb())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(
        bad.is_empty() && o.status.success(),
        "lintian: {}",
        show(&o)
    );
}

#[test]
fn rpmlint_is_clean() {
    if !tool_or_skip("rpmlint", "rpmlint") {
        return;
    }
    let o = Command::new("rpmlint")
        .arg("-c")
        .arg(repo().join("packaging/rpm/rpmlint.toml"))
        .arg(rpm())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("0 errors, 0 warnings"),
        "rpmlint: {}",
        show(&o)
    );
}

// ------------------------------------------------------------------------------------------------
// the unit
// ------------------------------------------------------------------------------------------------

/// Whether `tool` is installed; without it the test is SKIPPED locally and fails under
/// CI=true (tests/run-all.sh installs Debian's `package`).
fn tool_or_skip(tool: &str, package: &str) -> bool {
    if has(tool) {
        return true;
    }
    assert!(
        !under_ci(),
        "{tool} is required under CI=true (tests/run-all.sh installs {package})"
    );
    eprintln!("SKIPPED: no {tool} (apt-get install {package})");
    false
}

/// The hardening stays within the goal, and its comment states the measured score.
#[test]
fn unit_security_score_is_at_most_2_5() {
    if !tool_or_skip("systemd-analyze", "systemd") {
        return;
    }
    // measured as systemd >= 239 runs it: the unit plus the allow-list drop-in the packages
    // link there (a repeated [Service] section is the drop-in's effect)
    let unit = repo().join("systemd/pleg-guard.service");
    let dir = std::env::temp_dir().join(format!("pleg-guard-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let combined = dir.join("pleg-guard.service");
    std::fs::write(
        &combined,
        format!(
            "{}\n{}",
            std::fs::read_to_string(&unit).unwrap(),
            std::fs::read_to_string(repo().join("systemd/syscall-allowlist.conf")).unwrap()
        ),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&combined)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&o.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("pleg-guard.service: ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {}", show(&o)));
    assert!(score <= 2.5, "exposure {score} > 2.5:\n{text}");
    let body = std::fs::read_to_string(&unit).unwrap();
    assert!(
        body.contains(&format!(": {score:.1} OK")),
        "the unit's hardening comment does not state the measured score {score:.1}"
    );
}

// ------------------------------------------------------------------------------------------------
// old distributions: RHEL/CentOS 7 and 8, Amazon Linux 2, Ubuntu 18.04, Debian 10
// ------------------------------------------------------------------------------------------------

/// The oldest glibc the binary may need (RHEL/CentOS 7, Amazon Linux 2).
const GLIBC_CEILING: &str = "2.17";
/// The newest libgcc_s symbol version it may need (EL7's gcc 4.8).
const LIBGCC_CEILING: &str = "4.8.0";

/// Dotted version compare, numerically per part ("2.17" < "2.28").
fn version_le(a: &str, b: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(a) <= parts(b)
}

/// The highest `PREFIX<version>` symbol version in `objdump -T` output, e.g. GLIBC_2.17.
fn highest(objdump: &str, prefix: &str) -> Option<String> {
    let mut best: Option<String> = None;
    for word in objdump.split(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        let Some(v) = word.strip_prefix(prefix) else {
            continue;
        };
        if v.is_empty() || !v.chars().all(|c| c.is_ascii_digit() || c == '.') {
            continue;
        }
        if best.as_deref().is_none_or(|b| !version_le(v, b)) {
            best = Some(v.to_string());
        }
    }
    best
}

/// /usr/bin/pleg-guard as packaged in the .deb, extracted into a temporary directory.
fn packaged_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = out_dir("extracted");
        host_ok(
            "dpkg-deb",
            &["-x", deb().to_str().unwrap(), dir.to_str().unwrap()],
        );
        let bin = dir.join("usr/bin/pleg-guard");
        assert!(
            bin.is_file(),
            "no usr/bin/pleg-guard in {}",
            deb().display()
        );
        bin
    })
}

#[test]
fn binary_needs_at_most_glibc_2_17_and_an_old_libgcc() {
    let bin = packaged_binary();
    let bin_s = bin.to_str().unwrap();
    let dynsyms = host_ok("objdump", &["-T", bin_s]);
    let glibc = highest(&dynsyms, "GLIBC_").expect("no GLIBC_ symbol versions");
    assert!(
        version_le(&glibc, GLIBC_CEILING),
        "the binary needs GLIBC_{glibc} (> {GLIBC_CEILING}):\n{}",
        dynsyms
            .lines()
            .filter(|l| l.contains(&format!("GLIBC_{glibc}")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    if let Some(gcc) = highest(&dynsyms, "GCC_") {
        assert!(
            version_le(&gcc, LIBGCC_CEILING),
            "the binary needs GCC_{gcc} from libgcc_s (> {LIBGCC_CEILING})"
        );
    }
    // readelf agrees (another reader of the same version-needs section)
    let needs = host_ok("readelf", &["-V", "-W", bin_s]);
    let glibc_r = highest(&needs, "GLIBC_").expect("readelf -V shows no GLIBC_ versions");
    assert_eq!(glibc_r, glibc, "readelf and objdump disagree");
    // only libraries EL7 has in its base system
    let dynamic = host_ok("readelf", &["-d", "-W", bin_s]);
    for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
        let lib = line.rsplit('[').next().unwrap_or("").trim_end_matches(']');
        assert!(
            [
                "libc.so.6",
                "libm.so.6",
                "libdl.so.2",
                "libpthread.so.0",
                "librt.so.1",
                "libutil.so.1",
                "libgcc_s.so.1",
                "ld-linux-x86-64.so.2",
                "ld-linux-aarch64.so.1",
            ]
            .contains(&lib),
            "unexpected NEEDED {lib}:\n{dynamic}"
        );
    }
    eprintln!(
        "packaged binary: highest GLIBC_{glibc}, {}",
        if dynamic.contains("libgcc_s") {
            "links libgcc_s"
        } else {
            "no libgcc_s"
        }
    );
}

#[test]
fn deb_is_xz_compressed_and_its_depends_hold_on_old_releases() {
    // dpkg 1.18 (Ubuntu 16.04+, Debian 9+) reads xz and gzip members, not zstd
    let members = host_ok("ar", &["t", deb().to_str().unwrap()]);
    let members: Vec<&str> = members.lines().collect();
    assert_eq!(members[0], "debian-binary", "{members:?}");
    assert!(
        members
            .iter()
            .any(|m| *m == "data.tar.xz" || *m == "data.tar.gz"),
        "data member is not xz or gzip: {members:?}"
    );
    assert!(
        members
            .iter()
            .any(|m| *m == "control.tar.xz" || *m == "control.tar.gz"),
        "control member is not xz or gzip: {members:?}"
    );
    // Depends: libc6 at exactly the binary's highest GLIBC_ version, libgcc only as
    // "libgcc-s1 | libgcc1" (Debian 10 and Ubuntu 18.04 have libgcc1 only), systemd
    let depends = deb_field(deb(), "Depends");
    let dynsyms = host_ok("objdump", &["-T", packaged_binary().to_str().unwrap()]);
    let glibc = highest(&dynsyms, "GLIBC_").unwrap();
    let mut saw_libc = false;
    for dep in depends.split(',').map(str::trim) {
        if dep.starts_with("libc6") {
            assert_eq!(dep, format!("libc6 (>= {glibc})"), "Depends: {depends}");
            saw_libc = true;
        } else if dep.contains("libgcc") {
            let alts: Vec<&str> = dep.split('|').map(|a| a.trim()).collect();
            assert!(
                alts.iter().any(|a| a.starts_with("libgcc1")),
                "{dep}: Debian 10 / Ubuntu 18.04 have no libgcc-s1 (Depends: {depends})"
            );
        } else {
            assert_eq!(
                dep, "systemd",
                "unexpected dependency in Depends: {depends}"
            );
        }
    }
    assert!(saw_libc, "no libc6 in Depends: {depends}");
    let needs_libgcc = host_ok("readelf", &["-d", packaged_binary().to_str().unwrap()])
        .contains("[libgcc_s.so.1]");
    assert_eq!(
        depends.contains("libgcc"),
        needs_libgcc,
        "Depends names libgcc exactly when the binary links libgcc_s: {depends}"
    );
}

/// rpmlib() features rpm 4.11 (RHEL/CentOS 7, Amazon Linux 2) provides.
const RPM_4_11_FEATURES: &[&str] = &[
    "rpmlib(BuiltinLuaScripts)",
    "rpmlib(CompressedFileNames)",
    "rpmlib(ConcurrentAccess)",
    "rpmlib(ExplicitPackageProvide)",
    "rpmlib(FileCaps)",
    "rpmlib(FileDigests)",
    "rpmlib(HeaderLoadSortsTags)",
    "rpmlib(PartialHardlinkSets)",
    "rpmlib(PayloadFilesHavePrefix)",
    "rpmlib(PayloadIsBzip2)",
    "rpmlib(PayloadIsLzma)",
    "rpmlib(PayloadIsXz)",
    "rpmlib(ScriptletExpansion)",
    "rpmlib(ScriptletInterpreterArgs)",
    "rpmlib(TildeInVersions)",
    "rpmlib(VersionedDependencies)",
];

#[test]
fn rpm_payload_and_requirements_suit_rpm_4_11_and_glibc_2_17() {
    if !tool_or_skip("rpm", "rpm") {
        return;
    }
    let compressor = rpm_q(&["--queryformat", "%{PAYLOADCOMPRESSOR}"]);
    assert!(
        compressor == "gzip" || compressor == "xz",
        "payload compressor {compressor:?}: rpm 4.11 reads gzip and xz, not zstd"
    );
    let requires = rpm_q(&["--requires"]);
    for r in requires.lines().map(str::trim) {
        let name = r.split_whitespace().next().unwrap_or("");
        if name.starts_with("rpmlib(") {
            assert!(
                RPM_4_11_FEATURES.contains(&name),
                "{r}: not a feature rpm 4.11 has\n{requires}"
            );
        }
        // libc.so.6(GLIBC_2.17)(64bit): no version above the ceiling
        if let Some(v) = r.split("(GLIBC_").nth(1).and_then(|t| t.split(')').next()) {
            assert!(
                version_le(v, GLIBC_CEILING),
                "{r}: needs more than glibc {GLIBC_CEILING}\n{requires}"
            );
        }
    }
    assert!(!requires.contains("PayloadIsZstd"), "{requires}");
    assert!(
        requires.lines().any(|r| r.starts_with("libc.so.6")),
        "no libc requirement generated from the binary:\n{requires}"
    );
    // the same binary as the .deb's
    let digests = rpm_q(&["--queryformat", "[%{FILEDIGESTS} %{FILENAMES}\n]"]);
    let sum = host_ok("sha256sum", &[packaged_binary().to_str().unwrap()]);
    let sum = sum.split_whitespace().next().unwrap();
    assert!(
        digests
            .lines()
            .any(|l| l == format!("{sum} /usr/bin/pleg-guard")),
        "the rpm's binary is not the .deb's:\n{digests}"
    );
    // the scriptlets make /var/lib/pleg-guard (219 has no StateDirectory=) and link the
    // allow-list through the version check, before the unit is started; %preun unlinks it
    let scripts = rpm_q(&["--scripts"]);
    let link = scripts
        .find("/usr/lib/pleg-guard/syscall-allowlist apply")
        .unwrap_or_else(|| panic!("no allow-list step in %post:\n{scripts}"));
    let start = scripts
        .find("systemctl start pleg-guard.service")
        .unwrap_or_else(|| panic!("no start in %post:\n{scripts}"));
    assert!(
        link < start,
        "allow-list linked after the start:\n{scripts}"
    );
    assert!(
        scripts.contains("mkdir -p /var/lib/pleg-guard"),
        "{scripts}"
    );
    assert!(
        scripts.contains("/usr/lib/pleg-guard/syscall-allowlist remove"),
        "{scripts}"
    );
}

#[test]
fn deb_maintainer_scripts_make_the_state_directory_and_check_the_version_first() {
    let dir = out_dir("control");
    host_ok(
        "dpkg-deb",
        &["-e", deb().to_str().unwrap(), dir.to_str().unwrap()],
    );
    let postinst = std::fs::read_to_string(dir.join("postinst")).unwrap();
    assert!(
        postinst.contains("mkdir -p /var/lib/pleg-guard"),
        "{postinst}"
    );
    let link = postinst
        .find("/usr/lib/pleg-guard/syscall-allowlist apply")
        .unwrap_or_else(|| panic!("no allow-list step in postinst:\n{postinst}"));
    let start = postinst
        .find("deb-systemd-invoke")
        .unwrap_or_else(|| panic!("no start in postinst:\n{postinst}"));
    assert!(
        link < start,
        "allow-list linked after the start:\n{postinst}"
    );
    let postrm = std::fs::read_to_string(dir.join("postrm")).unwrap();
    assert!(
        postrm.contains("50-syscall-allowlist.conf"),
        "postrm does not unlink the allow-list:\n{postrm}"
    );
}

/// The unit must be right for systemd 219 to 257: no allow-list in the main unit (219 knows no
/// `@group`, 237 not `@system-service`: an allow-list of unknown names is nearly empty), only
/// deny-lists; `ProtectSystem=full` before `strict` (219 ignores the unknown `strict` and keeps
/// `full`); the allow-list only in the drop-in, which resets the filter first.
#[test]
fn unit_is_safe_from_systemd_219_to_257() {
    let unit = std::fs::read_to_string(repo().join("systemd/pleg-guard.service")).unwrap();
    let directives: Vec<(&str, &str)> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .collect();
    let filters: Vec<&str> = directives
        .iter()
        .filter(|(k, _)| *k == "SystemCallFilter")
        .map(|(_, v)| *v)
        .collect();
    assert!(!filters.is_empty(), "no SystemCallFilter at all");
    for f in &filters {
        assert!(
            f.starts_with('~'),
            "SystemCallFilter={f}: an allow-list in the main unit (219/237 do not know every group)"
        );
    }
    let protect: Vec<&str> = directives
        .iter()
        .filter(|(k, _)| *k == "ProtectSystem")
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(protect, ["full", "strict"], "ProtectSystem lines in order");
    assert!(directives.contains(&("StateDirectory", "pleg-guard")));

    let dropin = std::fs::read_to_string(repo().join("systemd/syscall-allowlist.conf")).unwrap();
    let lines: Vec<&str> = dropin
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        lines,
        [
            "[Service]",
            "SystemCallFilter=",
            "SystemCallFilter=@system-service",
            "SystemCallFilter=~@privileged @resources",
            "SystemCallFilter=~@mount @debug @obsolete @cpu-emulation",
        ],
        "the drop-in resets, allows @system-service, denies the rest again"
    );
    // the deny-list after the allow-list is the main unit's
    assert!(filters.contains(&"~@privileged @resources"));
    assert!(filters.contains(&"~@mount @debug @obsolete @cpu-emulation"));
}

/// `syscall-allowlist apply` with a stand-in `systemctl` printing each version: linked from 239
/// on, never before, nor for an unreadable version; a stale link is removed; an admin's own
/// file is left alone; `remove` unlinks.
#[test]
fn allowlist_is_linked_only_where_systemd_is_239_or_later() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = std::env::temp_dir().join(format!("pleg-guard-allowlist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("bin")).unwrap();
    let root = tmp.join("root");
    let link = root.join("etc/systemd/system/pleg-guard.service.d/50-syscall-allowlist.conf");
    let helper = repo().join("packaging/syscall-allowlist");
    let run = |first_line: Option<&str>, cmd: &str| -> String {
        let stub = tmp.join("bin/systemctl");
        match first_line {
            Some(l) => {
                std::fs::write(
                    &stub,
                    format!("#!/bin/sh\necho '{l}'\necho '+PAM +AUDIT'\n"),
                )
                .unwrap();
                std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            // a systemctl that fails (the host's own would be found on PATH if it was absent)
            None => {
                std::fs::write(&stub, "#!/bin/sh\nexit 1\n").unwrap();
                std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let o = Command::new("sh")
            .arg(&helper)
            .arg(cmd)
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", tmp.join("bin").display()),
            )
            .env("PLEG_GUARD_ROOT", &root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{first_line:?} {cmd}: {}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let linked = || {
        std::fs::read_link(&link)
            .ok()
            .is_some_and(|t| t == Path::new("/usr/lib/pleg-guard/syscall-allowlist.conf"))
    };
    for (version, want) in [
        (Some("systemd 219"), false),
        (Some("systemd 219 (219-78.el7_9.9)"), false),
        (Some("systemd 237"), false),
        (Some("systemd 238"), false),
        (Some("systemd 239 (239-82.el8_10.5)"), true),
        (Some("systemd 241"), true),
        (Some("systemd 247 (247.3-7+deb11u6)"), true),
        (Some("systemd 252 (252.39-1~deb12u1)"), true),
        (Some("systemd 257 (257.9-1~deb13u1)"), true),
        // after a link: an older systemd (say a rollback) removes it again
        (Some("systemd 237"), false),
        (Some("not systemd at all"), false),
        (None, false),
    ] {
        let out = run(version, "apply");
        assert_eq!(linked(), want, "{version:?}: {out}");
    }
    run(Some("systemd 252"), "apply");
    assert!(linked());
    run(Some("systemd 252"), "remove");
    assert!(!linked() && !link.exists());
    // an admin's own file of that name stays as it is
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::fs::write(&link, "[Service]\n").unwrap();
    let out = run(Some("systemd 252"), "apply");
    assert!(out.contains("not ours"), "{out}");
    assert_eq!(std::fs::read_to_string(&link).unwrap(), "[Service]\n");
    run(Some("systemd 237"), "apply");
    assert!(link.exists(), "an admin's file was removed");
    let _ = std::fs::remove_dir_all(&tmp);
}
