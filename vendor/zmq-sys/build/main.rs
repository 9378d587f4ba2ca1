//! Builds libzmq 4.3 from zeromq-src with CURVE, linked against the libsodium that the
//! libsodium-sys-stable crate built (zmesh's change to zmq-sys 0.12.0: the original passes
//! no libsodium, so libzmq has no CURVE), and on Linux with eventfd mailboxes (zmesh's second
//! change: see `eventfd_on_linux`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build/main.rs");
    // The libzmq source (vendor/zeromq-src, with zmesh's fix): the build script reads it
    // through zeromq-src, so a change to it must rebuild libzmq.
    println!("cargo:rerun-if-changed=../zeromq-src/vendor");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let dep = |name: &str| {
        env::var_os(name).map(PathBuf::from).unwrap_or_else(|| {
            panic!(
                "{} is not set: libsodium-sys-stable did not say where libsodium is",
                name
            )
        })
    };
    eventfd_on_linux();
    let lib = dep("DEP_SODIUM_LIB");
    let include = dep("DEP_SODIUM_INCLUDE");
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        // The draft API for ZMQ_ROUTER_NOTIFY (zmesh's third change): a dialled
        // ROUTER learns of its connection's loss in band, without a monitor socket (two
        // descriptors) per connection. Options and calls outside the draft behave the same.
        .enable_draft(true)
        .build();
}

/// zeromq-src configures libzmq by hand (an empty platform.hpp and a few defines) and, on
/// Linux, leaves out `ZMQ_HAVE_EVENTFD`, which libzmq's own CMake and autotools builds set
/// there. Without it every libzmq mailbox (one per socket, per context thread, per context) is
/// a socket pair, two file descriptors, instead of one eventfd: a dialled connection with its
/// monitor took 7 descriptors instead of 4 (BENCHMARKS.md P7). zeromq-src has no
/// option for defines, so they go in through the C++ flags that the `cc` crate reads for
/// this target (appended to any the caller set).
fn eventfd_on_linux() {
    let target = env::var("TARGET").unwrap_or_default();
    if !target.contains("linux") || target.contains("android") {
        return;
    }
    let var = format!("CXXFLAGS_{}", target.replace('-', "_"));
    let mut flags = env::var(&var).unwrap_or_default();
    for define in ["-DZMQ_HAVE_EVENTFD=1", "-DZMQ_HAVE_EVENTFD_CLOEXEC=1"] {
        if !flags.split_whitespace().any(|f| f == define) {
            flags.push(' ');
            flags.push_str(define);
        }
    }
    env::set_var(&var, flags.trim());
}
