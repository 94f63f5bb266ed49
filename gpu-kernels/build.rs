// Compiles the host emulator of the CUDA kernels (feature `host-emulator`),
// so that the kernel source is tested against pir-core without a GPU, with
// the same defines NVRTC gets (src/defines.rs).

include!("src/defines.rs");

fn main() {
    println!("cargo:rerun-if-changed=kernels/ethpir.cu");
    println!("cargo:rerun-if-changed=emulator/emulator.cpp");
    println!("cargo:rerun-if-changed=src/defines.rs");
    if std::env::var_os("CARGO_FEATURE_HOST_EMULATOR").is_some() {
        let mut build = cc::Build::new();
        for (name, value) in kernel_defines() {
            build.define(name, value.as_str());
        }
        build
            .cpp(true)
            .file("emulator/emulator.cpp")
            .flag("-std=c++20")
            .flag_if_supported("-Wno-unused-parameter")
            .opt_level(2)
            .compile("ethpir_emulator");
        println!("cargo:rustc-link-lib=pthread");
    }
}
