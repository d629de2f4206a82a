/*
 * The real driver and NVML functions behind the hooks: glibc's own dlsym
 * and dlvsym, the real libcuda.so.1 / libnvidia-ml.so.1 opened with our own
 * handles (never the global scope, which would find the hooks again), the
 * tables of their functions (gv_cu, gv_nv) and the process-wide setup.
 * Every hook calls in here; this file calls no hook, so the hooks and the
 * dispatch in loader.c (which points at every hook) import one way.
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
#include "interposer/loader_internal.h"

extern char **environ;

struct gv_cuda_real gv_cu;
struct gv_nvml_real gv_nv;
struct gv_ip_state gv_ip;

/*
 * Set while we dlopen the real libraries, so their own lookups are not
 * hooked.  initial-exec: read in dlsym without calling __tls_get_addr,
 * which sanitizer runtimes intercept before they are ready.
 */
_Thread_local int in_loader __attribute__((tls_model("initial-exec")));

/* --- the real dlsym and dlvsym ------------------------------------------ */

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

GV_NO_ASAN dlvsym_fn real_dlvsym(void)
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

GV_NO_ASAN dlsym_fn real_dlsym(void)
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

/*
 * Plain loops, not strcmp: sanitizer runtimes call dlsym before their
 * string interceptors work.
 */
GV_NO_ASAN bool same_name(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* --- the real functions' slots, from the one list of hooks.h ---------- */

static const struct {
    const char *name;
    void **real;
} cuda_hook_real[] = {
#define GV_X(sym, base, ver, pt) {#sym, (void **)&gv_cu.sym},
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
    void **real;
} nvml_hook_real[] = {
#define GV_X(sym) {#sym, (void **)&gv_nv.sym},
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
    for (size_t i = 0; i < COUNT(cuda_hook_real); i++)
        *cuda_hook_real[i].real = rd(cuda_handle, cuda_hook_real[i].name);
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
    for (size_t i = 0; i < COUNT(nvml_hook_real); i++)
        *nvml_hook_real[i].real = rd(nvml_handle, nvml_hook_real[i].name);
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
