/* Simulated GPU inventory and cross-process memory state (tests only). */
#include "fake_gpus.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct fake_proc_usage {
    _Atomic int32_t pid;
    _Atomic uint64_t bytes;
};

struct fake_state {
    struct {
        struct fake_proc_usage procs[FAKE_MAX_PROCS];
    } gpus[FAKE_MAX_GPUS];
};

static struct fake_gpu gpus[FAKE_MAX_GPUS];
static int ngpus;
static struct fake_state *state;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t charge_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t parse_bytes(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (tolower((unsigned char)*end)) {
    case 'k': v <<= 10; break;
    case 'm': v <<= 20; break;
    case 'g': v <<= 30; break;
    case 't': v <<= 40; break;
    default: break;
    }
    return v;
}

/* getpid() is a system call; the fake's hot paths ask for it on every allocation. */
static _Atomic int32_t self_pid;

static void forget_pid(void) { atomic_store(&self_pid, 0); }

/*
 * The pid the real NVML would report: the one in the outermost pid
 * namespace /proc shows (first NSpid entry), not getpid() inside a nested
 * namespace.
 */
static int32_t my_pid(void)
{
    int32_t p = atomic_load(&self_pid);
    if (p != 0)
        return p;
    p = (int32_t)getpid();
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "NSpid:", 6) == 0) {
            long v = strtol(line + 6, NULL, 10);
            if (v > 0)
                p = (int32_t)v;
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    atomic_store(&self_pid, p);
    return p;
}

static void set_default(int i)
{
    struct fake_gpu *g = &gpus[i];
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "NVIDIA Fake GPU %d", i);
    snprintf(g->uuid, sizeof(g->uuid), "GPU-%08x-0000-4000-8000-%012x", 0xfa4e0000u + (unsigned)i,
             (unsigned)i);
    const char *mem = getenv("GV_FAKE_GPU_MEMORY");
    g->mem_total = mem != NULL ? parse_bytes(mem) : 16ull << 30;
    g->pci_domain = 0;
    g->pci_bus = 0x3b + (unsigned)i;
    g->pci_device = 0;
    g->numa_node = i % 2;
    g->sm_count = 108;
    g->cc_major = 9;
    g->cc_minor = 0;
    g->mig_capable = -1;
    for (int l = 0; l < 18; l++)
        g->nvlink_peer[l] = -1;
    g->pcie_switch = -1;
}

/* uuid text -> 16 bytes: hex digits after "GPU-" / "MIG-", dashes skipped. */
static void uuid_to_bytes(const char *text, unsigned char *bytes)
{
    const char *p = strncmp(text, "GPU-", 4) == 0 || strncmp(text, "MIG-", 4) == 0 ? text + 4 : text;
    int n = 0;
    memset(bytes, 0, 16);
    for (; *p && n < 32; p++) {
        if (!isxdigit((unsigned char)*p))
            continue;
        int v = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
        bytes[n / 2] = (unsigned char)(bytes[n / 2] | (v << ((n % 2) ? 0 : 4)));
        n++;
    }
}

static void derive(struct fake_gpu *g)
{
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%08X:%02X:%02X.0", g->pci_domain, g->pci_bus,
             g->pci_device);
    uuid_to_bytes(g->uuid, g->uuid_bytes);
    uuid_to_bytes(g->mig, g->mig_bytes);
}

/* One device per line: key=value fields separated by spaces; "..." quotes. */
static void parse_line(char *line, int i)
{
    set_default(i);
    struct fake_gpu *g = &gpus[i];
    char *p = line;
    while (*p) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        char *key = p;
        while (*p && *p != '=' && !isspace((unsigned char)*p))
            p++;
        if (*p != '=')
            break;
        *p++ = '\0';
        char *val = p;
        if (*p == '"') {
            val = ++p;
            while (*p && *p != '"')
                p++;
        } else {
            while (*p && !isspace((unsigned char)*p))
                p++;
        }
        if (*p)
            *p++ = '\0';
        if (strcmp(key, "name") == 0)
            snprintf(g->name, sizeof(g->name), "%s", val);
        else if (strcmp(key, "uuid") == 0)
            snprintf(g->uuid, sizeof(g->uuid), "%s", val);
        else if (strcmp(key, "memory") == 0)
            g->mem_total = parse_bytes(val);
        else if (strcmp(key, "pci") == 0) /* domain:bus:device, hex */
            sscanf(val, "%x:%x:%x", &g->pci_domain, &g->pci_bus, &g->pci_device);
        else if (strcmp(key, "numa") == 0)
            g->numa_node = atoi(val);
        else if (strcmp(key, "sms") == 0)
            g->sm_count = atoi(val);
        else if (strcmp(key, "cores") == 0)
            g->no_core_count = atoi(val) == 0;
        else if (strcmp(key, "mig") == 0)
            snprintf(g->mig, sizeof(g->mig), "%s", val);
        else if (strcmp(key, "cc") == 0)
            sscanf(val, "%d.%d", &g->cc_major, &g->cc_minor);
        else if (strcmp(key, "migcap") == 0)
            g->mig_capable = atoi(val) != 0;
        else if (strcmp(key, "pcieswitch") == 0)
            g->pcie_switch = atoi(val);
        else if (strcmp(key, "nvlink") == 0) { /* peer:links,... e.g. 1:4,2:4 */
            int l = 0;
            for (char *t = val; *t && l < 18;) {
                int peer = -1, links = 0;
                if (sscanf(t, "%d:%d", &peer, &links) != 2)
                    break;
                for (int k = 0; k < links && l < 18; k++)
                    g->nvlink_peer[l++] = peer;
                t = strchr(t, ',');
                if (t == NULL)
                    break;
                t++;
            }
        }
    }
}

static void map_state(void)
{
    const char *path = getenv("GV_FAKE_GPU_STATE");
    int fd = -1;
    void *m = MAP_FAILED;
    if (path != NULL && *path) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0 && flock(fd, LOCK_EX) == 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof(struct fake_state))
                if (ftruncate(fd, sizeof(struct fake_state)) != 0)
                    st.st_size = -1;
            m = mmap(NULL, sizeof(struct fake_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            flock(fd, LOCK_UN);
        }
    }
    if (m == MAP_FAILED)
        m = mmap(NULL, sizeof(struct fake_state), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (fd >= 0)
        close(fd);
    state = m == MAP_FAILED ? NULL : m;
}

static void load(void)
{
    const char *cfg = getenv("GV_FAKE_GPU_CONFIG");
    FILE *f = cfg != NULL && *cfg ? fopen(cfg, "r") : NULL;
    if (f != NULL) {
        char line[512];
        while (ngpus < FAKE_MAX_GPUS && fgets(line, sizeof(line), f) != NULL) {
            char *s = line;
            while (isspace((unsigned char)*s))
                s++;
            if (*s == '\0' || *s == '#')
                continue;
            line[strcspn(line, "\n")] = '\0';
            parse_line(s, ngpus++);
        }
        fclose(f);
    } else {
        const char *count = getenv("GV_FAKE_GPU_COUNT");
        ngpus = count != NULL ? atoi(count) : 2;
        if (ngpus < 0)
            ngpus = 0;
        if (ngpus > FAKE_MAX_GPUS)
            ngpus = FAKE_MAX_GPUS;
        for (int i = 0; i < ngpus; i++)
            set_default(i);
    }
    for (int i = 0; i < ngpus; i++)
        derive(&gpus[i]);
    map_state();
    pthread_atfork(NULL, NULL, forget_pid);
}

int fake_gpu_count(void)
{
    pthread_once(&once, load);
    return ngpus;
}

const struct fake_gpu *fake_gpu_get(int i)
{
    return i >= 0 && i < fake_gpu_count() ? &gpus[i] : NULL;
}

/*
 * Entries are named by host pids, as the real NVML names processes whatever
 * the caller's pid namespace.  A caller in a nested namespace cannot signal
 * a host pid (ESRCH), but the host's /proc, which such a test keeps, still
 * lists it: without that, two processes of one namespaced container took
 * each other's entries for dead ones and reused them.
 */
static bool pid_alive(int32_t pid)
{
    if (pid <= 0)
        return false;
    if (pid == my_pid() || !(kill(pid, 0) != 0 && errno == ESRCH))
        return true;
    char path[32];
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    return access(path, F_OK) == 0;
}

uint64_t fake_gpu_mem_used(int i)
{
    if (fake_gpu_get(i) == NULL || state == NULL)
        return 0;
    uint64_t sum = 0;
    for (int k = 0; k < FAKE_MAX_PROCS; k++) {
        struct fake_proc_usage *u = &state->gpus[i].procs[k];
        if (pid_alive(atomic_load(&u->pid)))
            sum += atomic_load(&u->bytes);
    }
    return sum;
}

/* Our usage entry on GPU i, taking a free or dead one when needed. */
static struct fake_proc_usage *own_entry(int i)
{
    int32_t me = my_pid();
    struct fake_proc_usage *free_entry = NULL;
    for (int k = 0; k < FAKE_MAX_PROCS; k++) {
        struct fake_proc_usage *u = &state->gpus[i].procs[k];
        int32_t pid = atomic_load(&u->pid);
        if (pid == me)
            return u;
        if (free_entry == NULL && !pid_alive(pid)) {
            int32_t expected = pid;
            if (atomic_compare_exchange_strong(&u->pid, &expected, me)) {
                atomic_store(&u->bytes, 0);
                free_entry = u;
            }
        }
    }
    return free_entry;
}

uint64_t fake_gpu_cuda_total(int i)
{
    const struct fake_gpu *g = fake_gpu_get(i);
    if (g == NULL)
        return 0;
    const char *path = getenv("GV_FAKE_MIG_CONFIG");
    FILE *f = g->mig[0] && path && *path ? fopen(path, "r") : NULL;
    uint64_t total = g->mem_total;
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        int idx, used = 0;
        if (line[0] == '#' || sscanf(line, "%d%n", &idx, &used) != 1 || idx != i)
            continue;
        /* the first used MIG device index: "-" entries are holes */
        for (char *p = line + used + strspn(line + used, " \t"); *p && *p != '\n';) {
            unsigned gi, gb;
            if (sscanf(p, "%ug.%ugb", &gi, &gb) == 2 && gi > 0) {
                total = ((uint64_t)gb * 1024 - 256) << 20;
                break;
            }
            p += strcspn(p, ",\n");
            p += *p == ',';
        }
        break;
    }
    if (f)
        fclose(f);
    return total;
}

bool fake_gpu_mem_charge(int i, uint64_t bytes)
{
    const struct fake_gpu *g = fake_gpu_get(i);
    if (g == NULL || state == NULL)
        return false;
    /* Check-and-charge is serialised only within a process: the fake models
     * one card, and cross-process races only blur "free" momentarily. */
    pthread_mutex_lock(&charge_lock);
    bool ok = false;
    uint64_t used = fake_gpu_mem_used(i);
    struct fake_proc_usage *u = own_entry(i);
    uint64_t cap = fake_gpu_cuda_total(i); /* a MIG instance's memory, not the card's */
    if (u != NULL && bytes <= cap && used <= cap - bytes) {
        atomic_fetch_add(&u->bytes, bytes);
        ok = true;
    }
    pthread_mutex_unlock(&charge_lock);
    return ok;
}

void fake_gpu_mem_uncharge(int i, uint64_t bytes)
{
    if (fake_gpu_get(i) == NULL || state == NULL)
        return;
    pthread_mutex_lock(&charge_lock);
    struct fake_proc_usage *u = own_entry(i);
    if (u != NULL) {
        uint64_t cur = atomic_load(&u->bytes);
        atomic_store(&u->bytes, cur > bytes ? cur - bytes : 0);
    }
    pthread_mutex_unlock(&charge_lock);
}

int fake_gpu_procs(int i, pid_t *pids, uint64_t *bytes, int max)
{
    if (fake_gpu_get(i) == NULL || state == NULL)
        return 0;
    int n = 0;
    for (int k = 0; k < FAKE_MAX_PROCS; k++) {
        struct fake_proc_usage *u = &state->gpus[i].procs[k];
        int32_t pid = atomic_load(&u->pid);
        uint64_t b = atomic_load(&u->bytes);
        if (!pid_alive(pid) || b == 0)
            continue;
        if (n < max) {
            pids[n] = pid;
            bytes[n] = b;
        }
        n++;
    }
    return n;
}
