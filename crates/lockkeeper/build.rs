//! Generates the etcd v3 gRPC client of `lockkeeper::etcd` (feature `etcd`) from the protobuf
//! files in `proto/`, lockkeeper's own subset of etcd's API.
//!
//! The protoc that compiles them is the one the `protoc-bin-vendored` crate ships, named to
//! prost-build explicitly: the build never looks for a protoc on PATH or in `PROTOC`, so
//! building lockkeeper needs nothing installed beyond Rust. Only clients are generated (no
//! server), without tonic's transport helpers: `src/etcd/rpc.rs` builds the channel itself.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "etcd")]
    etcd::generate();
}

#[cfg(feature = "etcd")]
mod etcd {
    /// The files compiled, and the directory their imports are resolved in.
    const PROTOS: [&str; 2] = ["proto/etcdserverpb.proto", "proto/mvccpb.proto"];
    const INCLUDE: &str = "proto";

    /// Writes `etcdserverpb.rs` and `mvccpb.rs` into `OUT_DIR`. A failure stops the build with
    /// its reason: there is no fallback to look for.
    pub(super) fn generate() {
        println!("cargo:rerun-if-changed={INCLUDE}");
        let protoc = match protoc_bin_vendored::protoc_bin_path() {
            Ok(path) => path,
            Err(err) => panic!(
                "protoc-bin-vendored has no protoc for this platform ({err}); \
                 build lockkeeper without its `etcd` feature (--no-default-features)"
            ),
        };
        let mut config = prost_build::Config::new();
        config.protoc_executable(protoc);
        let compiled = tonic_prost_build::configure()
            .build_server(false)
            .build_client(true)
            .build_transport(false)
            .compile_with_config(config, &PROTOS, &[INCLUDE]);
        if let Err(err) = compiled {
            panic!("compiling lockkeeper's etcd protobuf files failed: {err}");
        }
    }
}
