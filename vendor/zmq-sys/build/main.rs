//! Builds libzmq 4.3 from zeromq-src with CURVE, linked against the libsodium that the
//! libsodium-sys-stable crate built (zmesh's change to zmq-sys 0.12.0: the original passes
//! no libsodium, so libzmq has no CURVE).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let dep = |name: &str| {
        env::var_os(name).map(PathBuf::from).unwrap_or_else(|| {
            panic!(
                "{} is not set: libsodium-sys-stable did not say where libsodium is",
                name
            )
        })
    };
    let lib = dep("DEP_SODIUM_LIB");
    let include = dep("DEP_SODIUM_INCLUDE");
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}
