/* Preloaded into a benchmark's processes to hide instructions from the libraries in them.
 *
 * Where the processor and Linux support CPUID faulting (arch_prctl ARCH_SET_CPUID), every
 * CPUID instruction in the process traps; the handler executes it and clears the feature
 * bits KERNELTUNE_BENCH_CPUID_CLEAR names, so that onnxruntime's MLAS and OpenBLAS pick the
 * kernels of a processor without them (both read CPUID when they load). The variable holds
 * entries "leaf.subleaf.register=mask" or "leaf.register=mask" (any subleaf), comma
 * separated, numbers in C notation. KERNELTUNE_BENCH_CPUID_MASKED=1 tells the process that
 * the mask holds; the dynamic loader chose glibc's own routines before this ran.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

enum { EAX, EBX, ECX, EDX };
enum { MAX_ENTRIES = 32 };

struct entry {
    unsigned leaf;
    long subleaf; /* -1: any */
    int reg;
    unsigned clear;
};

static struct entry entries[MAX_ENTRIES];
static int entry_count;

static int register_index(const char *name)
{
    static const char *const names[] = {"eax", "ebx", "ecx", "edx"};
    for (int i = 0; i < 4; i++)
        if (strncmp(name, names[i], 3) == 0)
            return i;
    return -1;
}

/* One entry of the variable; 0 when it does not parse. */
static int parse_entry(char *text, struct entry *entry)
{
    char *end;
    entry->leaf = strtoul(text, &end, 0);
    if (*end != '.')
        return 0;
    text = end + 1;
    entry->subleaf = -1;
    if (*text >= '0' && *text <= '9') {
        entry->subleaf = strtol(text, &end, 0);
        if (*end != '.')
            return 0;
        text = end + 1;
    }
    entry->reg = register_index(text);
    if (entry->reg < 0 || text[3] != '=')
        return 0;
    entry->clear = strtoul(text + 4, &end, 0);
    return *end == '\0';
}

static void on_fault(int signal_number, siginfo_t *info, void *context)
{
    greg_t *registers = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *code = (const unsigned char *)registers[REG_RIP];
    (void)info;
    if (code[0] != 0x0f || code[1] != 0xa2) { /* a fault of its own: let it kill */
        signal(signal_number, SIG_DFL);
        return;
    }
    unsigned leaf = (unsigned)registers[REG_RAX], subleaf = (unsigned)registers[REG_RCX];
    unsigned values[4];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, subleaf, values[EAX], values[EBX], values[ECX], values[EDX]);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    for (int i = 0; i < entry_count; i++)
        if (entries[i].leaf == leaf && (entries[i].subleaf < 0 || entries[i].subleaf == subleaf))
            values[entries[i].reg] &= ~entries[i].clear;
    registers[REG_RAX] = values[EAX];
    registers[REG_RBX] = values[EBX];
    registers[REG_RCX] = values[ECX];
    registers[REG_RDX] = values[EDX];
    registers[REG_RIP] += 2;
}

__attribute__((constructor)) static void mask_cpuid(void)
{
    const char *variable = getenv("KERNELTUNE_BENCH_CPUID_CLEAR");
    unsetenv("KERNELTUNE_BENCH_CPUID_MASKED");
    if (variable == NULL)
        return;
    char *text = strdup(variable);
    for (char *part = strtok(text, ","); part != NULL; part = strtok(NULL, ",")) {
        if (entry_count == MAX_ENTRIES || !parse_entry(part, &entries[entry_count])) {
            free(text);
            return; /* unmasked; the process sees no KERNELTUNE_BENCH_CPUID_MASKED */
        }
        entry_count++;
    }
    free(text);
    struct sigaction action = {0};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, NULL) == 0
        && syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) == 0)
        setenv("KERNELTUNE_BENCH_CPUID_MASKED", "1", 1);
}
