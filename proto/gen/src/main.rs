//! Compiles proto/cri-api-v1.proto with tonic-prost-build and prints the Rust code to stdout.
//! protoc is the one crates.io's protoc-bin-vendored ships (nothing to install).
//! proto/regen.sh adds the header.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::env::temp_dir().join(format!("pleg-guard-cri-gen-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        // pleg-guard dials its own unix-socket connection: no tonic::transport::Channel
        .build_transport(false)
        // the fake runtime in the tests implements only the calls it needs
        .generate_default_stubs(true)
        // the server side exists only for the fake CRI runtime in tests
        .server_mod_attribute("runtime.v1", "#[cfg(test)]")
        .out_dir(&out)
        .compile_with_config(config, &[proto_dir.join("cri-api-v1.proto")], &[proto_dir])?;
    let code = std::fs::read_to_string(out.join("runtime.v1.rs"))?;
    std::fs::remove_dir_all(&out)?;
    print!("{code}");
    Ok(())
}
