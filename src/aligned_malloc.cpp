// Linked into every compiled kernel module with -Wl,--wrap=malloc, so that each array
// the kernels allocate (a product's packed panels and accumulators, its output) starts
// on a cache line. With malloc's 16-byte steps, where the heap happened to put these
// buffers moved Gemm's blocked path by 15-35% from one process to the next, and with it
// the crossovers that calibration measures (see kerneltune/aligned.py). The memory is
// released with free(), which takes aligned_alloc's blocks as it takes malloc's.

#include <cstddef>
#include <cstdlib>

extern "C" void *__wrap_malloc(std::size_t size)
{
    constexpr std::size_t alignment = 64;
    // aligned_alloc wants a multiple of the alignment, and malloc(0) a pointer to free
    return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment
                                             + (size == 0 ? alignment : 0));
}
