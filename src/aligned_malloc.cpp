// Linked into every compiled kernel module with -Wl,--wrap=malloc, so that each array
// of 1 KiB or more that the kernels allocate (a product's packed panels and accumulators,
// its output) starts on a cache line. With malloc's 16-byte steps, where the heap happened
// to put these buffers moved Gemm's blocked path by 15-35% from one process to the next,
// and with it the crossovers that calibration measures (see kerneltune/aligned.py). The
// memory is released with free(), which takes aligned_alloc's blocks as it takes malloc's.
//
// Smaller blocks stay with malloc: aligned_alloc bypasses malloc's per-thread cache and
// costs 20-60 ns more per block, and an 8 x 8 x 8 product makes a dozen blocks (shapes,
// reference counts, its output, its accumulators), which took it from 0.7 to 1.3 us.
// Accumulators are the small blocks whose placement moves a product. DOUBLE's, 4 x 64
// doubles, took 128 x 128 x 128 DOUBLE from 40-42 us to 40-54 us with the heap's state.
// FLOAT's, 4 x 64 floats on the blocked path and 256 for a one-row product on the skinny
// path, made no difference at 128 x 128 x 128 but do on wider products: left to malloc,
// 16 x 512 x 512 FLOAT on one thread took 83-117 us with the heap's state (in 12 fresh
// processes), aligned 83-89 us; a one-row product 17-36 us, aligned 17-19 us; on two
// threads (36 processes each) the blocked path took 54 us or more in every process,
// aligned 46-52 us in 29 of them. Aligning them left an 8 x 8 x 8 product's time as it
// was (its one block of accumulators).

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
