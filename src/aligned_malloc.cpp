// Linked into every compiled kernel module with -Wl,--wrap=malloc and -Wl,--wrap=calloc,
// so that each array of 1 KiB or more that the kernels allocate (a product's packed panels
// and accumulators, its output; np.zeros's through calloc as np.empty's through malloc)
// starts on a cache line: where the heap happened to put these buffers moved Gemm's paths
// from one process to the next, and with them the crossovers that calibration measures.
// The memory is released with free(), which takes aligned_alloc's blocks as it takes
// malloc's.
//
// Smaller blocks stay with malloc: aligned_alloc bypasses malloc's per-thread cache, which
// a small product's dozen blocks would pay for. The accumulators (1 KiB and more) are the
// smallest blocks whose placement moves a product. The figures are in docs/kernels.md
// (Alignment).

#include <cstddef>
#include <cstdlib>
#include <cstring>

extern "C" void *__real_malloc(std::size_t size);
extern "C" void *__real_calloc(std::size_t count, std::size_t size);

namespace {

constexpr std::size_t alignment = 64;
constexpr std::size_t smallest_aligned = 1024;

void *aligned(std::size_t size)
{
    // aligned_alloc wants a multiple of the alignment
    return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}

}  // namespace

extern "C" void *__wrap_malloc(std::size_t size)
{
    return size < smallest_aligned ? __real_malloc(size) : aligned(size);
}

extern "C" void *__wrap_calloc(std::size_t count, std::size_t size)
{
    // calloc's own answer to a product that overflows
    if (size != 0 && count > static_cast<std::size_t>(-1) / size)
        return __real_calloc(count, size);
    std::size_t total = count * size;
    if (total < smallest_aligned)
        return __real_calloc(count, size);
    void *block = aligned(total);
    return block ? std::memset(block, 0, total) : nullptr;
}
