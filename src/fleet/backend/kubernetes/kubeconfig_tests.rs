//! Small kubeconfig texts, good and bad. testdata/ holds a self-signed test-only certificate
//! and its key (no value outside these tests).

use super::*;

const CERT: &str = include_str!("testdata/client.pem");
const KEY: &str = include_str!("testdata/client-key.pem");

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig whose current context is `ctx`, with `cluster` and `user` bodies (YAML lines
/// indented for the `cluster:` and `user:` mappings).
fn config(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\ncontexts:\n- name: other\n  context:\n    cluster: nope\n    user: nope\n- name: ctx\n  context:\n    cluster: c1\n    user: u1\n    namespace: ignored\nclusters:\n- name: c1\n  cluster:\n{cluster}\nusers:\n- name: u1\n  user:\n{user}\n"
    )
}

fn ca_data() -> String {
    format!("    certificate-authority-data: {}", b64(CERT))
}

fn parse(text: &str) -> Result<Kubeconfig, KubeconfigError> {
    Kubeconfig::parse(Path::new("/etc/pleg-guard/kubeconfig"), text)
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(k) => panic!("accepted: {k:?}\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_service_account_token_kubeconfig_is_resolved() {
    let k = parse(&config(
        &format!(
            "    server: https://10.0.0.1:6443/\n{}\n    tls-server-name: kubernetes",
            ca_data()
        ),
        "    token: abc.def-ghi",
    ))
    .unwrap();
    assert_eq!(k.context, "ctx");
    assert_eq!(k.server.host, "10.0.0.1");
    assert_eq!(k.server.port, 6443);
    assert_eq!(k.server.base_path, "");
    assert_eq!(k.server.tls_server_name, "kubernetes");
    assert_eq!(k.ca.as_deref(), Some(CERT.as_bytes()));
    assert_eq!(k.token, Some(Token::Inline("abc.def-ghi".to_owned())));
    assert!(k.identity.is_none());
    let shown = format!("{k:?}");
    assert!(!shown.contains("abc.def"), "Debug hides the token: {shown}");
}

#[test]
fn files_are_relative_to_the_kubeconfig_and_read_at_once() {
    let dir = crate::testing::tempdir("pg-kubeconfig");
    std::fs::write(dir.join("ca.pem"), CERT).unwrap();
    std::fs::write(dir.join("node.pem"), CERT).unwrap();
    std::fs::write(dir.join("node-key.pem"), KEY).unwrap();
    std::fs::write(dir.join("token"), "tok-1\n").unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        config(
            "    server: https://[fd00::1]/k8s/clusters/c-1/\n    certificate-authority: ca.pem",
            "    client-certificate: node.pem\n    client-key: node-key.pem\n    tokenFile: token\n    token: ignored-when-a-file-is-given",
        ),
    )
    .unwrap();
    let k = Kubeconfig::load(&path).unwrap();
    assert_eq!(k.server.host, "fd00::1");
    assert_eq!(k.server.port, 443);
    assert_eq!(k.server.base_path, "/k8s/clusters/c-1");
    assert_eq!(k.server.tls_server_name, "fd00::1");
    assert_eq!(k.ca.as_deref(), Some(CERT.as_bytes()));
    assert_eq!(k.token, Some(Token::File(dir.join("token"))));
    let id = k.identity.as_ref().unwrap();
    assert_eq!(id.key, KEY.as_bytes());
    assert!(!format!("{k:?}").contains("PRIVATE"), "Debug hides the key");

    std::fs::write(dir.join("token"), "\n").unwrap();
    let e = Kubeconfig::load(&path).unwrap_err();
    assert!(
        matches!(&e, KubeconfigError::Unreadable { what, reason, .. } if what.contains("tokenFile") && reason == "empty"),
        "{e}"
    );
    std::fs::write(dir.join("token"), "tok-2\n").unwrap();
    std::fs::remove_file(dir.join("node-key.pem")).unwrap();
    let e = Kubeconfig::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("users[].user.client-key") && e.contains("node-key.pem"),
        "{e}"
    );
    let e = Kubeconfig::load(&dir.join("absent")).unwrap_err();
    assert!(matches!(e, KubeconfigError::Unreadable { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inline_client_certificates_and_the_system_bundle() {
    let k = parse(&config(
        "    server: https://api.example:443",
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(CERT),
            b64(KEY)
        ),
    ))
    .unwrap();
    assert!(k.ca.is_none(), "no CA given: the system's bundle");
    assert!(k.token.is_none());
    assert_eq!(k.identity.map(|i| i.cert), Some(CERT.as_bytes().to_vec()));
}

#[test]
fn plugins_and_insecure_settings_are_refused_clearly() {
    let server = "    server: https://h:6443";
    let e = parse(&config(
        server,
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws",
    ))
    .unwrap_err();
    assert!(matches!(e, KubeconfigError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("`exec`") && e.to_string().contains("not supported yet"),
        "{e}"
    );
    let e = err(&config(server, "    auth-provider:\n      name: gcp"));
    assert!(e.contains("`auth-provider` is not supported yet"), "{e}");
    let e = err(&config(server, "    username: admin\n    password: x"));
    assert!(e.contains("basic authentication"), "{e}");
    let e = err(&config(server, "    token: t\n    as: someone"));
    assert!(e.contains("impersonation"), "{e}");
    let e = parse(&config(
        "    server: https://h:6443\n    insecure-skip-tls-verify: true",
        "    token: t",
    ))
    .unwrap_err();
    assert!(matches!(e, KubeconfigError::Insecure { .. }), "{e}");
    assert!(e.to_string().contains("insecure-skip-tls-verify"), "{e}");
    assert!(
        parse(&config(
            "    server: https://h:6443\n    insecure-skip-tls-verify: false",
            "    token: t",
        ))
        .is_ok()
    );
    let e = parse(&config("    server: http://h:8080", "    token: t")).unwrap_err();
    assert!(matches!(e, KubeconfigError::Insecure { .. }), "{e}");
    let e = err(&config(
        "    server: https://h:6443\n    proxy-url: http://proxy:3128",
        "    token: t",
    ));
    assert!(e.contains("proxy-url"), "{e}");
}

#[test]
fn bad_kubeconfigs_name_what_is_wrong() {
    let ok_cluster = "    server: https://h:6443";
    for (text, expect) in [
        (String::new(), "empty".to_owned()),
        ("a: [".to_owned(), "not YAML".to_owned()),
        ("- 1\n- 2".to_owned(), "not a mapping".to_owned()),
        ("a: 1\n---\nb: 2".to_owned(), "more than one YAML document".to_owned()),
        ("kind: Pod\n".to_owned(), "not \"Config\"".to_owned()),
        ("kind: Config\n".to_owned(), "no `current-context`".to_owned()),
        ("current-context: x\n".to_owned(), "no entry named \"x\" in `contexts`".to_owned()),
        (
            "current-context: x\ncontexts: 3\n".to_owned(),
            "`contexts` is not a list".to_owned(),
        ),
        (
            "current-context: x\ncontexts:\n- name: x\n".to_owned(),
            "has no `context` mapping".to_owned(),
        ),
        (
            "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n".to_owned(),
            "names no user".to_owned(),
        ),
        (
            "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n- name: x\n  context: {cluster: c, user: u}\n".to_owned(),
            "two entries named \"x\"".to_owned(),
        ),
        (config("    certificate-authority: /ca.pem", "    token: t"), "has no `server`".to_owned()),
        (config("    server: 6443", "    token: t"), "`clusters[].cluster.server` is not a string".to_owned()),
        (config("    server: ftp://h", "    token: t"), "not an https:// URL".to_owned()),
        (config("    server: https://h:6443?x=1", "    token: t"), "has a query".to_owned()),
        (
            config(ok_cluster, &format!("    client-certificate-data: {}", b64(CERT))),
            "go together".to_owned(),
        ),
        (config(ok_cluster, "    token: \"\""), "has no credential".to_owned()),
        (config(ok_cluster, "    {}"), "has no credential".to_owned()),
        (config(ok_cluster, "    token: \"a b\""), "not one line of printable".to_owned()),
        (
            config(&format!("{ok_cluster}\n    certificate-authority-data: '!!'"), "    token: t"),
            "`clusters[].cluster.certificate-authority-data` is not base64".to_owned(),
        ),
        (
            config(&format!("{ok_cluster}\n    certificate-authority-data: {}", b64("junk")), "    token: t"),
            "holds no PEM certificate".to_owned(),
        ),
        (
            config(
                &format!("{ok_cluster}\n{}\n    certificate-authority: /ca.pem", ca_data()),
                "    token: t",
            ),
            "keep one".to_owned(),
        ),
        (
            config(
                ok_cluster,
                &format!("    client-certificate-data: {}\n    client-key-data: {}", b64(CERT), b64(CERT)),
            ),
            "no PEM private key".to_owned(),
        ),
        (
            config(&format!("{ok_cluster}\n    insecure-skip-tls-verify: yes-please"), "    token: t"),
            "is not true or false".to_owned(),
        ),
    ] {
        let e = err(&text);
        assert!(e.contains(&expect), "{text}\n=> {e}\n(expected {expect})");
        assert!(e.contains("/etc/pleg-guard/kubeconfig"), "{e}");
    }
}

#[test]
fn token_files_are_one_line() {
    let dir = crate::testing::tempdir("pg-tokenfile");
    let f = dir.join("t");
    std::fs::write(&f, "  tok\n").unwrap();
    assert_eq!(read_token_file(&f).unwrap(), "tok");
    std::fs::write(&f, "a\nb\n").unwrap();
    assert!(read_token_file(&f).is_err());
    std::fs::write(&f, vec![b'a'; usize::try_from(MAX_FILE).unwrap() + 1]).unwrap();
    assert!(read_token_file(&f).unwrap_err().contains("larger than"));
    let _ = std::fs::remove_dir_all(&dir);
}

proptest::proptest! {
    /// Whatever the text, resolving it never panics.
    #[test]
    fn any_text_is_an_answer_not_a_panic(text in "\\PC{0,400}") {
        let _ = parse(&text);
    }
}
