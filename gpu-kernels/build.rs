// Compiles the host emulator of the CUDA kernels (feature `host-emulator`),
// so that the kernel source is tested against pir-core without a GPU.
fn main() {
    println!("cargo:rerun-if-changed=kernels/ethpir.cu");
    println!("cargo:rerun-if-changed=emulator/emulator.cpp");
    if std::env::var_os("CARGO_FEATURE_HOST_EMULATOR").is_some() {
        cc::Build::new()
            .cpp(true)
            .file("emulator/emulator.cpp")
            .flag("-std=c++20")
            .flag_if_supported("-Wno-unused-parameter")
            .opt_level(2)
            .compile("ethpir_emulator");
        println!("cargo:rustc-link-lib=pthread");
    }
}
