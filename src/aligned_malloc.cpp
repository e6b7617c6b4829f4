// Linked into every compiled kernel module with -Wl,--wrap=malloc, so that each array
// of 1 KiB or more that the kernels allocate (a product's packed panels and accumulators,
// its output) starts on a cache line: where the heap happened to put these buffers moved
// Gemm's blocked path from one process to the next, and with it the crossovers that
// calibration measures. The memory is released with free(), which takes aligned_alloc's
// blocks as it takes malloc's.
//
// Smaller blocks stay with malloc: aligned_alloc bypasses malloc's per-thread cache, which
// a small product's dozen blocks would pay for. The accumulators (1 KiB and more) are the
// smallest blocks whose placement moves a product. The figures are in docs/kernels.md
// (Alignment).

#include <cstddef>
#include <cstdlib>

extern "C" void *__real_malloc(std::size_t size);

extern "C" void *__wrap_malloc(std::size_t size)
{
    constexpr std::size_t alignment = 64;
    constexpr std::size_t smallest_aligned = 1024;
    if (size < smallest_aligned)
        return __real_malloc(size);
    // aligned_alloc wants a multiple of the alignment
    return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}
