//! Generates the raw bindings from the system `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`
//! (found with pkg-config: libibverbs, librdmacm) and
//! compiles bindgen's wrappers for every `static inline` verb, so that `ibv_post_send`,
//! `ibv_poll_cq`, `ibv_bind_mw`, `ibv_query_device_ex`, `ibv_wr_*` ... are callable from Rust.
//! Nothing is hand-ported: the wrappers are generated from the same header the C code uses.

use std::env;
use std::path::PathBuf;

fn main() {
    let lib = pkg_config::Config::new().atleast_version("1.8").probe("libibverbs").unwrap_or_else(|e| {
        panic!(
            "typed-verbs-sys needs the system libibverbs development files \
                 (Debian: `apt-get install libibverbs-dev pkg-config libclang-dev`, \
                 or run scripts/install-deps): {e}"
        )
    });

    // The RDMA connection manager (`<rdma/rdma_cma.h>`), from the same rdma-core.
    let cm = pkg_config::Config::new().probe("librdmacm").unwrap_or_else(|e| {
        panic!(
            "typed-verbs-sys needs the system librdmacm development files \
                 (Debian: `apt-get install librdmacm-dev`, or run scripts/install-deps): {e}"
        )
    });

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let wrapper_c = out.join("static_wrappers.c");

    let mut builder = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_str().expect("utf-8 path").to_owned())
        .allowlist_function("_*ibv_.*")
        .allowlist_type("_*ibv_.*")
        .allowlist_type("verbs_.*")
        .allowlist_var("IBV_.*")
        .allowlist_var("IB_UVERBS_.*")
        .allowlist_type("ib_uverbs_.*")
        .allowlist_function("rdma_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*")
        .allowlist_type("sockaddr_in")
        .allowlist_type("sockaddr_in6")
        .allowlist_var("AF_INET")
        .allowlist_var("AF_INET6")
        // The system calls (poll, fcntl, mmap, memfd_create, ioctl, ...) and their constants
        // come from the libc crate in typed-verbs; only the udmabuf ioctl's argument is here.
        .allowlist_type("udmabuf_create")
        .allowlist_var("UDMABUF_FLAGS_CLOEXEC")
        // C enums become Rust constants: every value the kernel or a newer provider may report
        // stays representable (an out-of-range Rust enum would be UB).
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("static_wrappers"))
        .generate_comments(false);
    for path in lib.include_paths.iter().chain(&cm.include_paths) {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().expect("bindgen could not generate bindings for <infiniband/verbs.h>");
    bindings.write_to_file(out.join("bindings.rs")).expect("could not write bindings.rs");

    // The generated C file defines one exported wrapper per static inline function.
    let mut cc = cc::Build::new();
    cc.file(&wrapper_c)
        // bindgen's wrapper file starts with `#include "<manifest>/wrapper.h"`.
        .include(&manifest)
        // -O2 forced: the post/poll wrappers then compile to a tail jump into the provider.
        .opt_level(2)
        .warnings(false);
    for path in lib.include_paths.iter().chain(&cm.include_paths) {
        cc.include(path);
    }
    cc.compile("typed_verbs_static_wrappers");
    // The wrapper archive must come before -libverbs on the link line; cc emits its own
    // `rustc-link-lib=static=...`, and pkg-config's `-libverbs` is re-emitted after it.
    for l in cm.libs.iter().chain(&lib.libs) {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
}
