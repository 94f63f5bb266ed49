//! CUDA hint builder (public-matrix expansion and the hint product on the GPU). Filled by the gpu-kernels issue.
