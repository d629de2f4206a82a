/*
 * gpuvisor run: run a command in a GPU slice on this machine, without
 * Kubernetes.  It creates a shared region for the run, sets the interposer's
 * environment contract (docs/contracts.md, "Interposer") and preloads
 * libgpuvisor.so into the command; every process the command starts shares
 * the slice.  `gpuvisor ps` lists the runs.
 * Exit codes: the command's own, 2 for bad usage or values, 1 when the run
 * cannot be set up, 128+N when the command died of signal N.
 */
#include <errno.h>
#include <getopt.h>
#include <link.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/gv_alloc.h"
#include "cli/commands.h"
#include "shm/gv_shm.h"

#define MAX_DEVICES 16

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuvisor run [--device N[,M...]] [--gpumem MEM] [--gpucores PCT]\n"
            "                    [--priority P] [--oversubscribe [--gpumem-share MEM]]\n"
            "                    [--name NAME] [--lib PATH]\n"
            "                    -- command [args...]\n\n"
            "Runs the command in a GPU slice enforced by libgpuvisor.so.\n"
            "  --device       GPUs the command may use (indices; sets CUDA_VISIBLE_DEVICES)\n"
            "  --gpumem       memory per GPU: MiB (4096), a quantity (4Gi, 512Mi) or a\n"
            "                 percentage of each GPU (25%%); default: the whole GPU\n"
            "  --gpucores     compute share per GPU, percent 1..100 (default: no limit)\n"
            "  --priority     0 (highest) .. 15 (default 0)\n"
            "  --oversubscribe  allow a memory limit above the GPU (managed memory)\n"
            "  --gpumem-share   with --oversubscribe: device memory per GPU (MiB or a\n"
            "                 quantity); the rest of --gpumem is managed memory\n"
            "  --name         name shown by `gpuvisor ps` (default run-<pid>)\n"
            "  --lib          the interposer (default: ../lib/libgpuvisor.so beside this\n"
            "                 binary, or $GPUVISOR_LIB)\n");
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuvisor run: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'gpuvisor run --help' for usage.\n");
    va_end(ap);
    return 2;
}

static bool parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    if (s == NULL || *s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
        return false;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || errno != 0 || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* "0,2" -> validated CUDA_VISIBLE_DEVICES value. */
static bool parse_devices(const char *s, char *out, size_t n)
{
    char buf[256];
    bool seen[1024] = {false};
    int count = 0;
    if (strlen(s) >= sizeof(buf))
        return false;
    snprintf(buf, sizeof(buf), "%s", s);
    out[0] = '\0';
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (!parse_int(tok, 0, 1023, &v) || seen[v] || ++count > MAX_DEVICES)
            return false;
        seen[v] = true;
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%ld", used ? "," : "", v);
    }
    return count > 0 && s[strlen(s) - 1] != ',';
}

/* A bare integer is MiB (HAMi's gpumem unit); anything else a Kubernetes quantity ("4Gi"). */
static int parse_mem_bytes(const char *opt, const char *s, int64_t *bytes)
{
    long v;
    struct gv_error err;
    if (parse_int(s, 1, INT64_MAX >> 20, &v)) {
        *bytes = (int64_t)v << 20;
    } else if (gv_quantity_value(s, bytes, &err) != GV_OK) {
        return bad_usage("%s: %s (expected MiB like 4096, a quantity like 4Gi%s)", opt, err.msg,
                         strcmp(opt, "--gpumem") == 0 ? ", or 25%" : "");
    }
    if (*bytes <= 0)
        return bad_usage("%s \"%s\": must be more than zero", opt, s);
    return 0;
}

/* --gpumem: "NN%" -> a percentage of each GPU, else bytes (parse_mem_bytes). */
static int parse_gpumem(const char *s, char *key, size_t keyn, char *val, size_t valn)
{
    size_t len = strlen(s);
    long v;
    if (len > 1 && s[len - 1] == '%') {
        char num[16];
        if (len - 1 >= sizeof(num))
            return bad_usage("--gpumem \"%s\": expected a percentage 1..100", s);
        memcpy(num, s, len - 1);
        num[len - 1] = '\0';
        if (!parse_int(num, 1, 100, &v))
            return bad_usage("--gpumem \"%s\": expected a percentage 1..100", s);
        snprintf(key, keyn, "GPUVISOR_DEVICE_MEMORY_PERCENT");
        snprintf(val, valn, "%ld", v);
        return 0;
    }
    int64_t bytes;
    int rc = parse_mem_bytes("--gpumem", s, &bytes);
    if (rc != 0)
        return rc;
    snprintf(key, keyn, "CUDA_DEVICE_MEMORY_LIMIT");
    snprintf(val, valn, "%lld", (long long)bytes);
    return 0;
}

static bool valid_name(const char *s)
{
    if (*s == '\0' || strlen(s) > 64 || *s == '.')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

/* A sanitizer-built interposer needs the sanitizer runtime preloaded before it. */
static int find_asan(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "/libasan.so") != NULL) {
        snprintf(data, PATH_MAX, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

static int default_lib(char *out, size_t n)
{
    const char *env = getenv("GPUVISOR_LIB");
    if (env != NULL && *env) {
        snprintf(out, n, "%s", env);
        return 0;
    }
    char self[PATH_MAX - 32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return -1;
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    snprintf(out, n, "%s/../lib/libgpuvisor.so", self);
    return 0;
}

static volatile sig_atomic_t child_pid;

static void forward_signal(int sig)
{
    if (child_pid > 0)
        kill((pid_t)child_pid, sig);
}

/* Refuses a live run of the same name; removes a stale one. */
static int prepare_region(const char *path, const char *name)
{
    struct gv_shm *old = NULL;
    if (gv_shm_open(path, GV_SHM_READONLY, &old, NULL) == GV_OK) {
        const struct gv_shm_region *r = gv_shm_region(old);
        bool live = false;
        for (int i = 0; i < GV_SHM_MAX_PROCS && !live; i++)
            live = gv_shm_proc_alive(&r->procs[i]);
        gv_shm_close(old);
        if (live) {
            fprintf(stderr, "gpuvisor run: a run named \"%s\" is still live (%s)\n", name, path);
            return 2;
        }
    }
    unlink(path);
    struct gv_shm *shm = NULL;
    struct gv_error err;
    if (gv_shm_open(path, GV_SHM_CREATE, &shm, &err) != GV_OK) {
        fprintf(stderr, "gpuvisor run: %s\n", err.msg);
        return 1;
    }
    gv_shm_close(shm);
    return 0;
}

int gv_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},   {"gpumem", required_argument, NULL, 'm'},
        {"gpucores", required_argument, NULL, 'c'}, {"priority", required_argument, NULL, 'p'},
        {"oversubscribe", no_argument, NULL, 'o'},  {"name", required_argument, NULL, 'n'},
        {"gpumem-share", required_argument, NULL, 's'},
        {"lib", required_argument, NULL, 'l'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char devices[256] = "", mem_key[64] = "", mem_val[32] = "", name[80] = "";
    char lib[PATH_MAX] = "";
    long cores = -1, prio = -1;
    int64_t share = 0;
    bool oversub = false;
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (!parse_devices(optarg, devices, sizeof(devices)))
                return bad_usage("--device \"%s\": expected distinct GPU indices like 0 or 0,2",
                                 optarg);
            break;
        case 'm':
            if ((rc = parse_gpumem(optarg, mem_key, sizeof(mem_key), mem_val, sizeof(mem_val))))
                return rc;
            break;
        case 'c':
            if (!parse_int(optarg, 1, 100, &cores))
                return bad_usage("--gpucores \"%s\": expected a percentage 1..100", optarg);
            break;
        case 'p':
            if (!parse_int(optarg, 0, 15, &prio))
                return bad_usage("--priority \"%s\": expected 0 (highest) .. 15", optarg);
            break;
        case 'o': oversub = true; break;
        case 's':
            if ((rc = parse_mem_bytes("--gpumem-share", optarg, &share)))
                return rc;
            break;
        case 'n':
            if (!valid_name(optarg))
                return bad_usage("--name \"%s\": use up to 64 of [A-Za-z0-9._-]", optarg);
            snprintf(name, sizeof(name), "%s", optarg);
            break;
        case 'l': snprintf(lib, sizeof(lib), "%s", optarg); break;
        case 'h': usage(stdout); return 0;
        default:
            return bad_usage("unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return bad_usage("no command given (put it after --)");
    if (share != 0 && !oversub)
        return bad_usage("--gpumem-share needs --oversubscribe");
    if (lib[0] == '\0' && default_lib(lib, sizeof(lib)) != 0)
        return bad_usage("cannot locate libgpuvisor.so; use --lib");
    char real_lib[PATH_MAX];
    if (realpath(lib, real_lib) == NULL || access(real_lib, R_OK) != 0) {
        fprintf(stderr, "gpuvisor run: interposer %s: %s\n", lib, strerror(errno));
        return 1;
    }
    if (access("/etc/gpuvisor/limits.env", F_OK) == 0)
        fprintf(stderr, "gpuvisor run: warning: /etc/gpuvisor/limits.env exists (inside a "
                        "gpuvisor container): its limits apply instead of these\n");
    if (name[0] == '\0')
        snprintf(name, sizeof(name), "run-%d", (int)getpid());

    char dir[PATH_MAX], region[PATH_MAX + 96];
    gv_shm_local_dir(dir, sizeof(dir));
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpuvisor run: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(region, sizeof(region), "%s/%s.cache", dir, name);
    if ((rc = prepare_region(region, name)) != 0)
        return rc;

    char asan[PATH_MAX] = "";
    dl_iterate_phdr(find_asan, asan);
    const char *old_preload = getenv("LD_PRELOAD");
    char preload[3 * PATH_MAX];
    snprintf(preload, sizeof(preload), "%s%s%s%s%s", asan, asan[0] ? " " : "", real_lib,
             old_preload && *old_preload ? " " : "", old_preload ? old_preload : "");

    struct sigaction sa, old_int, old_quit, old_term, old_hup;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gpuvisor run: fork: %s\n", strerror(errno));
        unlink(region);
        return 1;
    }
    if (pid == 0) {
        char num[24];
        setenv("LD_PRELOAD", preload, 1);
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", region, 1);
        if (devices[0])
            setenv("CUDA_VISIBLE_DEVICES", devices, 1);
        if (mem_key[0])
            setenv(mem_key, mem_val, 1);
        if (cores > 0) {
            snprintf(num, sizeof(num), "%ld", cores);
            setenv("CUDA_DEVICE_SM_LIMIT", num, 1);
        }
        if (prio >= 0) {
            snprintf(num, sizeof(num), "%ld", prio);
            setenv("CUDA_TASK_PRIORITY", num, 1);
            /* Runs on this machine meet in one priority directory
             * (docs/compute-share.md) unless the caller chose one. */
            char node[PATH_MAX + 8];
            snprintf(node, sizeof(node), "%s/node", dir);
            if (getenv("GPUVISOR_NODE_DIR") == NULL && (mkdir(node, 0700) == 0 || errno == EEXIST))
                setenv("GPUVISOR_NODE_DIR", node, 1);
        }
        if (oversub)
            setenv("CUDA_OVERSUBSCRIBE", "true", 1);
        if (share != 0) {
            snprintf(num, sizeof(num), "%lld", (long long)share);
            setenv("GPUVISOR_DEVICE_MEMORY_SHARE", num, 1);
        }
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "gpuvisor run: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    /* Like system(): the terminal's signals reach the child directly;
     * signals sent to us are passed on. */
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGQUIT, &sa, &old_quit);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    unlink(region);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}
