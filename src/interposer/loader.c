/*
 * How libgpuvisor.so gets between programs and the driver:
 *
 *  - exported hooks with the drivers' own symbol names (LD_PRELOAD,
 *    /etc/ld.so.preload, or programs linked against libcuda.so.1);
 *  - an exported dlsym, so programs and frameworks that dlopen libcuda /
 *    libnvidia-ml and look symbols up themselves (nvidia-smi, the CUDA
 *    runtime's fallbacks) get the hooks too;
 *  - cuGetProcAddress / cuGetProcAddress_v2 hooks, which is how the CUDA
 *    runtime (shared and static) fetches every driver entry point: the real
 *    driver resolves the version and stream flavour, and we replace its
 *    answer with the hook implementing that same function.
 *
 * The real functions come from our own dlopen handles, never from the
 * global scope (which would find the hooks again).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gv_sanitizer.h"
#include "interposer/interposer.h"

extern char **environ;

struct gv_cuda_real gv_cu;
struct gv_nvml_real gv_nv;
struct gv_ip_state gv_ip;

typedef void *(*dlsym_fn)(void *, const char *);

/*
 * dlsym is called by sanitizer runtimes while they initialise, before their
 * shadow memory exists: the dlsym path must not be instrumented.
 */
#if GV_ASAN
#define GV_NO_ASAN __attribute__((no_sanitize_address))
#else
#define GV_NO_ASAN
#endif
/* clang can guarantee a tail call; gcc makes one at -O1 and above. */
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(musttail)
#define GV_TAIL __attribute__((musttail))
#endif
#endif
#ifndef GV_TAIL
#define GV_TAIL
#endif

/*
 * Set while we dlopen the real libraries, so their own lookups are not
 * hooked.  initial-exec: read in dlsym without calling __tls_get_addr,
 * which sanitizer runtimes intercept before they are ready.
 */
static _Thread_local int in_loader __attribute__((tls_model("initial-exec")));

/* --- the real dlsym and dlvsym ------------------------------------------ */

typedef void *(*dlvsym_fn)(void *, const char *, const char *);

/*
 * We export dlvsym, so a call to "dlvsym" from this library would reach our
 * own (-Bsymbolic), and the global scope finds ours first too.  glibc's is
 * found by reading the dynamic symbol table of the object that defines
 * dlinfo (libc.so.6 since glibc 2.34, libdl.so.2 before; dlinfo is not
 * interposed by us nor by sanitizer runtimes): its GNU hash table gives the
 * default (non-hidden) version of "dlvsym".  Plain loops, no libc string
 * calls: this runs before sanitizer runtimes are ready.
 */
GV_NO_ASAN static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (; *s != '\0'; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

GV_NO_ASAN static bool same_name(const char *a, const char *b);

GV_NO_ASAN static void *elf_default_symbol(const struct link_map *lm, const char *name)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnuhash = NULL;
    const ElfW(Half) *versym = NULL;
    /* ld.so relocates these entries in place, except on a read-only dynamic section. */
#define GV_DPTR(d) ((d)->d_un.d_ptr < (ElfW(Addr))lm->l_addr ? (d)->d_un.d_ptr + lm->l_addr : (d)->d_un.d_ptr)
    for (const ElfW(Dyn) *d = lm->l_ld; d != NULL && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)GV_DPTR(d);
        else if (d->d_tag == DT_STRTAB)
            strtab = (const char *)GV_DPTR(d);
        else if (d->d_tag == DT_GNU_HASH)
            gnuhash = (const uint32_t *)GV_DPTR(d);
        else if (d->d_tag == DT_VERSYM)
            versym = (const ElfW(Half) *)GV_DPTR(d);
    }
#undef GV_DPTR
    /* glibc has been built with GNU hash tables for over a decade. */
    if (symtab == NULL || strtab == NULL || gnuhash == NULL)
        return NULL;
    uint32_t nbuckets = gnuhash[0], symoffset = gnuhash[1], bloom_size = gnuhash[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnuhash + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t h = gnu_hash(name);
    if (nbuckets == 0)
        return NULL;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; i++) {
        uint32_t h2 = chain[i - symoffset];
        const ElfW(Sym) *sym = &symtab[i];
        /* A definition of that name, in its default (non-hidden) version. */
        if ((h | 1) == (h2 | 1) && sym->st_shndx != SHN_UNDEF && sym->st_value != 0 &&
            same_name(strtab + sym->st_name, name) && (versym == NULL || !(versym[i] & 0x8000)))
            return (void *)(lm->l_addr + sym->st_value);
        if (h2 & 1)
            break;
    }
    return NULL;
}

GV_NO_ASAN static dlvsym_fn real_dlvsym(void)
{
    static _Atomic(dlvsym_fn) fn;
    dlvsym_fn f = atomic_load_explicit(&fn, memory_order_acquire);
    if (f != NULL)
        return f;
    Dl_info info;
    struct link_map *lm = NULL;
    if (dladdr1((void *)&dlinfo, &info, (void **)&lm, RTLD_DL_LINKMAP) != 0 && lm != NULL)
        f = (dlvsym_fn)elf_default_symbol(lm, "dlvsym");
    atomic_store_explicit(&fn, f, memory_order_release);
    return f;
}

GV_NO_ASAN static dlsym_fn real_dlsym(void)
{
    static _Atomic(dlsym_fn) fn;
    dlsym_fn f = atomic_load_explicit(&fn, memory_order_acquire);
    if (f != NULL)
        return f;
    dlvsym_fn vs = real_dlvsym();
    /* The next dlsym after us; it moved into libc at glibc 2.34. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; vs != NULL && i < sizeof(versions) / sizeof(versions[0]) && f == NULL; i++)
        f = (dlsym_fn)vs(RTLD_NEXT, "dlsym", versions[i]);
    atomic_store_explicit(&fn, f, memory_order_release);
    return f;
}

/* --- dispatch tables ----------------------------------------------------- */

struct hook {
    const char *name;
    const char *base;
    int version;
    int per_thread;
    void *hook;
    void **real;
};

static const struct hook cuda_hooks[] = {
#define GV_X(sym, base, ver, pt) {#sym, #base, ver, pt, (void *)sym, (void **)&gv_cu.sym},
    GV_CUDA_HOOKS(GV_X)
#undef GV_X
};

static const struct {
    const char *name;
    void **real;
} cuda_used[] = {
#define GV_X(sym) {#sym, (void **)&gv_cu.sym},
    GV_CUDA_USED(GV_X)
#undef GV_X
};

static const struct {
    const char *name;
    void *hook;
    void **real;
} nvml_hooks[] = {
#define GV_X(sym) {#sym, (void *)sym, (void **)&gv_nv.sym},
    GV_NVML_HOOKS(GV_X)
#undef GV_X
};

static const struct {
    const char *name;
    void **real;
} nvml_used[] = {
#define GV_X(sym) {#sym, (void **)&gv_nv.sym},
    GV_NVML_USED(GV_X)
#undef GV_X
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* --- configuration and shared region ------------------------------------ */

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void init_logging(void)
{
    gv_log_init("gpuvisor", GV_LOG_ERROR);
    if (getenv("GPUVISOR_LOG_LEVEL") == NULL) {
        int level = gv_log_parse_level(getenv("LIBCUDA_LOG_LEVEL"));
        if (level >= 0)
            gv_log_set_level((gv_log_level)level);
    }
    const char *file = getenv("GPUVISOR_LOG_FILE");
    if (file != NULL && *file) {
        int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
            gv_log_set_fd(fd);
    }
}

static void on_fork_child(void)
{
    /* The child is a new process: it takes its own slot when it attaches. */
    if (gv_ip.shm != NULL) {
        gv_shm_after_fork(gv_ip.shm);
        struct gv_error err;
        if (gv_shm_proc_attach(gv_ip.shm, (int32_t)getpid(), gv_ip.cfg.priority, &err) != GV_OK)
            gv_error("shared region: %s", err.msg);
    }
}

static void setup(void)
{
    struct gv_error err;
    init_logging();
    if (gv_ipcfg_load(&gv_ip.cfg, environ, &err) != GV_OK) {
        gv_error("configuration refused, failing closed (allocations return out of memory): %s",
                 err.msg);
        return;
    }
    gv_ip.cfg_ok = true;
    const char *path = gv_ip.cfg.shared_cache[0] ? gv_ip.cfg.shared_cache : NULL;
    if (gv_shm_open(path, GV_SHM_CREATE, &gv_ip.shm, &err) != GV_OK) {
        gv_error("shared region not usable, %s: %s",
                 gv_ipcfg_has_limits(&gv_ip.cfg) ? "failing closed" : "no accounting", err.msg);
        gv_ip.shm = NULL;
        return;
    }
    if (gv_shm_proc_attach(gv_ip.shm, (int32_t)getpid(), gv_ip.cfg.priority, &err) != GV_OK) {
        gv_error("shared region: %s", err.msg);
        gv_shm_close(gv_ip.shm);
        gv_ip.shm = NULL;
        return;
    }
    pthread_atfork(NULL, NULL, on_fork_child);
    gv_info("configuration from %s, shared region %s", gv_ip.cfg.source,
            path ? path : "(private to this process)");
}

void gv_ip_setup(void) { pthread_once(&setup_once, setup); }

/* --- loading the real libraries ----------------------------------------- */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT;
static void *cuda_handle, *nvml_handle;

static void *open_real(const char *soname)
{
    in_loader++;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    in_loader--;
    if (h == NULL)
        gv_warn("cannot load %s: %s", soname, dlerror());
    return h;
}

static void load_cuda(void)
{
    gv_ip_setup();
    dlsym_fn rd = real_dlsym();
    cuda_handle = open_real("libcuda.so.1");
    if (cuda_handle == NULL || rd == NULL)
        return;
    for (size_t i = 0; i < COUNT(cuda_hooks); i++)
        *cuda_hooks[i].real = rd(cuda_handle, cuda_hooks[i].name);
    for (size_t i = 0; i < COUNT(cuda_used); i++)
        *cuda_used[i].real = rd(cuda_handle, cuda_used[i].name);
}

static void load_nvml(void)
{
    gv_ip_setup();
    dlsym_fn rd = real_dlsym();
    nvml_handle = open_real("libnvidia-ml.so.1");
    if (nvml_handle == NULL || rd == NULL)
        return;
    for (size_t i = 0; i < COUNT(nvml_hooks); i++)
        *nvml_hooks[i].real = rd(nvml_handle, nvml_hooks[i].name);
    for (size_t i = 0; i < COUNT(nvml_used); i++)
        *nvml_used[i].real = rd(nvml_handle, nvml_used[i].name);
}

bool gv_ip_cuda_ready(void)
{
    pthread_once(&cuda_once, load_cuda);
    return cuda_handle != NULL;
}

void *gv_ip_cuda_sym(const char *name)
{
    dlsym_fn rd = real_dlsym();
    return gv_ip_cuda_ready() && rd != NULL ? rd(cuda_handle, name) : NULL;
}

bool gv_ip_nvml_ready(void)
{
    pthread_once(&nvml_once, load_nvml);
    return nvml_handle != NULL;
}

/* --- dlsym --------------------------------------------------------------- */

/*
 * Plain loops, not strcmp: sanitizer runtimes call dlsym before their
 * string interceptors work.
 */
GV_NO_ASAN static bool same_name(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

GV_NO_ASAN static void *hook_for_name(const char *name)
{
    if (name[0] == 'c' && name[1] == 'u') {
        for (size_t i = 0; i < COUNT(cuda_hooks); i++)
            if (same_name(cuda_hooks[i].name, name))
                return cuda_hooks[i].hook;
    } else if (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l') {
        for (size_t i = 0; i < COUNT(nvml_hooks); i++)
            if (same_name(nvml_hooks[i].name, name))
                return nvml_hooks[i].hook;
    }
    return NULL;
}

/*
 * RTLD_NEXT is relative to the caller's object, which the real dlsym reads
 * from its return address: it must be reached by a tail call so that
 * address is our caller's (verified by test_interposer.sh).  RTLD_NEXT
 * lookups are not redirected to hooks: whoever asks for "the next" function
 * wraps it deliberately.
 */
GV_EXPORT GV_NO_ASAN void *dlsym(void *handle, const char *name)
{
    dlsym_fn rd = real_dlsym();
    if (rd == NULL)
        return NULL; /* glibc's dlsym not found: nothing to answer with */
    if (handle == RTLD_NEXT)
        GV_TAIL return rd(handle, name);
    void *p = rd(handle, name);
    if (p == NULL || in_loader)
        return p;
    void *h = hook_for_name(name);
    return h != NULL ? h : p;
}

/* The same for versioned lookups (the driver libraries' symbols are unversioned,
 * so any version the caller names finds them). */
GV_EXPORT GV_NO_ASAN void *dlvsym(void *handle, const char *name, const char *version)
{
    dlvsym_fn rv = real_dlvsym();
    if (rv == NULL)
        return NULL;
    if (handle == RTLD_NEXT)
        GV_TAIL return rv(handle, name, version);
    void *p = rv(handle, name, version);
    if (p == NULL || in_loader)
        return p;
    void *h = hook_for_name(name);
    return h != NULL ? h : p;
}

/* --- cuGetProcAddress ---------------------------------------------------- */

/*
 * The hook standing for the driver function fn that the driver chose for
 * (symbol, cudaVersion, flags).  Identity with the functions we resolved
 * decides first; the name table is the fallback for drivers whose table
 * entries are not their exported symbols.
 */
static void *hook_for_proc(void *fn, const char *symbol, int cudaVersion, cuuint64_t flags)
{
    for (size_t i = 0; i < COUNT(cuda_hooks); i++)
        if (*cuda_hooks[i].real == fn)
            return cuda_hooks[i].hook;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct hook *best = NULL;
    for (int pass = want_pt; pass >= 0 && best == NULL; pass--)
        for (size_t i = 0; i < COUNT(cuda_hooks); i++) {
            const struct hook *h = &cuda_hooks[i];
            if (h->per_thread == pass && h->version <= cudaVersion &&
                strcmp(h->base, symbol) == 0 && (best == NULL || h->version > best->version))
                best = h;
        }
    return best != NULL ? best->hook : NULL;
}

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status, bool v2)
{
    if (!gv_ip_cuda_ready())
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc;
    if (v2 && gv_cu.cuGetProcAddress_v2 != NULL)
        rc = gv_cu.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    else if (gv_cu.cuGetProcAddress != NULL) {
        rc = gv_cu.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
        if (status != NULL)
            *status = rc == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS
                                         : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    } else
        return CUDA_ERROR_NOT_SUPPORTED;
    gv_trace("cuGetProcAddress(%s, %d, 0x%llx) = %d", symbol ? symbol : "(null)", cudaVersion,
             (unsigned long long)flags, (int)rc);
    if (rc != CUDA_SUCCESS || pfn == NULL || *pfn == NULL || symbol == NULL)
        return rc;
    void *h = hook_for_proc(*pfn, symbol, cudaVersion, flags);
    if (h != NULL)
        *pfn = h;
    return rc;
}

GV_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    return proc_address(symbol, pfn, cudaVersion, flags, NULL, false);
}

GV_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    return proc_address(symbol, pfn, cudaVersion, flags, status, true);
}

GV_EXPORT CUresult cuInit(unsigned int Flags)
{
    GV_NEED_CU(cuInit);
    if (!gv_ip.cfg_ok)
        return CUDA_ERROR_INVALID_VALUE; /* the reason is in the log */
    return gv_cu.cuInit(Flags);
}
